"""The names of a parameter tree's leaves: "albert/encoder/group_0/inner_group_0/ffn/output/kernel".

One spelling for every place that matches parameters by name: the optimizer's weight-decay and
trust-ratio masks (SPEC 6.3), the checkpoint's restore placement and the sharding table.
"""
from __future__ import annotations

from typing import Any, Callable

import jax


def path_name(path: tuple[Any, ...]) -> str:
    """A tree path as the "/"-joined name, e.g. "albert/pooler/kernel"."""
    return jax.tree_util.keystr(path, simple=True, separator="/")


def named_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> dict[str, Any]:
    """{"a/b/c": leaf} over the leaves of `tree` (stopping at `is_leaf` nodes, e.g. boxes)."""
    return {path_name(path): leaf
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]}

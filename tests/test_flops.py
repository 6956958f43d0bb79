"""train/flops.py: the analytic FLOPs of a forward pass equal the matmul FLOPs of the traced model
(every dot_general in its jaxpr, scan bodies times their length), for each kind of task."""
import math

import jax
import numpy as np
import pytest

from albert_jax.model import (
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    example_inputs,
    get_config,
)
from albert_jax.pretraining import init_inputs as pretraining_init_inputs
from albert_jax.train import flops

SEQ, PREDICTIONS = 8, 3


def matmul_flops(jaxpr: jax.extend.core.Jaxpr) -> int:
    """2 x multiply-adds of every dot_general, walking into sub-jaxprs (scan: x length)."""
    total = 0
    for equation in jaxpr.eqns:
        if equation.primitive.name == "dot_general":
            (contracting, _), _ = equation.params["dimension_numbers"]
            lhs_shape = equation.invars[0].aval.shape
            total += 2 * math.prod(equation.outvars[0].aval.shape) * math.prod(
                lhs_shape[axis] for axis in contracting)
        repeat = equation.params.get("length", 1) if equation.primitive.name == "scan" else 1
        for value in equation.params.values():
            for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    total += repeat * matmul_flops(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    total += repeat * matmul_flops(sub)
    return total


def traced_flops(model, params, inputs) -> int:
    return matmul_flops(jax.make_jaxpr(lambda p: model.apply({"params": p}, *inputs))(
        params).jaxpr)


@pytest.mark.parametrize("overrides", [
    dict(num_hidden_layers=3),  # both halves shared: the last layer at [CLS] + masked positions
    dict(num_hidden_layers=3, sharing="none"),  # every position, then gathered
    dict(num_hidden_layers=30),  # scanned, not unrolled
    dict(num_hidden_layers=3, num_hidden_groups=3, inner_group_num=2),
])
def test_analytic_flops_are_the_traced_matmuls(overrides):
    config = get_config("tiny", **overrides)
    cases = [
        (AlbertForPreTraining(config), pretraining_init_inputs(SEQ, PREDICTIONS),
         flops.forward_flops_per_sequence(config, SEQ, PREDICTIONS, PREDICTIONS + 1)),
        # A classifier: the backbone read at [CLS]; its 2-way dense stands where the analytic
        # count has the SOP head's.
        (AlbertForSequenceClassification(config, num_labels=2), example_inputs((1, SEQ)),
         flops.forward_flops_per_sequence(config, SEQ, 0, output_positions=1)),
    ]
    for model, inputs, expected in cases:
        params = jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs))["params"]
        assert traced_flops(model, params, inputs) == expected, type(model).__name__
    # SQuAD reads every position: its [H, 2] span head stands where the SOP head's [H, 2] is
    # (the traced pooler goes unused, as in the count).
    model = AlbertForQuestionAnswering(config)
    inputs = example_inputs((1, SEQ))
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs))["params"]
    squad_head, sop_head = 2 * SEQ * config.hidden_size * 2, 2 * config.hidden_size * 2
    assert (traced_flops(model, params, inputs)
            == flops.forward_flops_per_sequence(config, SEQ, 0) - sop_head + squad_head)


def test_the_last_layer_skips_work_only_when_both_halves_are_shared():
    shared, unshared = get_config("albert-base-v2"), get_config("bert-base")
    full = flops.forward_flops_per_sequence(shared, 512, 0)
    assert flops.forward_flops_per_sequence(shared, 512, 0, output_positions=1) < 0.95 * full
    assert (flops.forward_flops_per_sequence(unshared, 512, 0, output_positions=1)
            == flops.forward_flops_per_sequence(unshared, 512, 0))
    np.testing.assert_equal(flops.train_flops_per_step(shared, 2, 512, 20),
                            3 * 2 * flops.forward_flops_per_sequence(shared, 512, 20, 21))

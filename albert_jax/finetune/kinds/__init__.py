"""What several task families share, one module per kind: classification (and regression),
multiple choice, token classification. Imports only finetune/core."""

"""Training loops (fine-tuning, frozen, pretraining) over shared scaffolding, checkpoints and run folders."""

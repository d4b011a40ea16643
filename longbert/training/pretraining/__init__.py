"""Continued pretraining: masked-language-model training of a backbone on unlabelled long text, read by a strategy."""

"""longbert models as transformers models: the model class for the Auto classes and pipeline, and the import hook."""

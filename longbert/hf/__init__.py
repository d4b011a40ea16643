"""longbert models as transformers models: the config, the model class, the Auto-class import hook, the hub."""

"""The model: backbone loading, saved settings, the classifier, its folder on disk, and its model card."""

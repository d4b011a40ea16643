"""Models made of trained runs without training: ensembles (members chosen on validation) and hybrids with TF-IDF."""

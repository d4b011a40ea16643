"""`longbert compare`: train strategies alike, test them, the statistics, the verdict and the report."""

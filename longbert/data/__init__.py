"""Documents in (files, folders, hub ids, Python objects) and whole tokenized documents out."""

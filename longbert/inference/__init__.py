"""A trained model at work: predict, explain, ONNX export and its runtime, serve."""

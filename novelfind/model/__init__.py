"""The model: ``weights`` (MobileNet-V2's weights as one record: the file, its hash, the transforms, the
model key, the classifier's labels) and ``features`` (the extractors: ONNX Runtime, PyTorch, CUDA).
"""

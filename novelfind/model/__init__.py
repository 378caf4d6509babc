"""The model: MobileNet-V2's weights and the feature extractors."""

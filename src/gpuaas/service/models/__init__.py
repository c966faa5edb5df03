"""Pydantic request and response models of the API, by area."""

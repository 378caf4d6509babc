"""Ranking: the methods, their k-NN, event, moment and solver parts, over a feature source."""

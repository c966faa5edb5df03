"""Cluster provisioners: what carries a tenant cluster out (see :mod:`.base`)."""

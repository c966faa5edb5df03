"""Storage provisioners: what realises a tenant's volumes (see :mod:`.base`)."""

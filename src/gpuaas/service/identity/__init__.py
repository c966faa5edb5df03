"""Who is who: tenants, users, tenant memberships, invitations and API tokens.

The business rules of identity, reachable without HTTP: each function takes the database session
and the calling :class:`~gpuaas.service.auth.Principal`, decides what the caller may do, changes
the rows and returns the view the API answers with (or raises the problem the API answers with).
``gpuaas.service.routers.identity`` only translates HTTP to these calls and back.

- :mod:`.rows`: finding tenants, users, memberships and invitations by name, and committing;
- :mod:`.tenants`: tenants and the provider's terms (capacity, borrowing, lending, job size);
- :mod:`.users`: users and their platform roles (never fewer than one enabled provider-admin);
- :mod:`.members`: a tenant's members and the invitations of users that exist already;
- :mod:`.tokens`: minting, listing and revoking tokens, each with a scope fixed when minted.

The first provider-admin and its token (the bootstrap) are :mod:`gpuaas.service.auth`'s, since
the app makes them before any request.
"""

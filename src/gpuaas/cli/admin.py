"""``gpuaas admin``: what the provider does with the database in hand, not through the API.

``reset-token`` is the way back in when the provider-admin token is lost (or was never seen: a
first start that failed shows none): whoever can open the database is the provider already.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpuaas.cli.main import app
from gpuaas.cli.serve import DataDirOption, DbOption, _migrate_or_exit, _settings

admin_app = typer.Typer(help="Provider administration with direct access to the database.")
app.add_typer(admin_app, name="admin")


@admin_app.command("reset-token")
def reset_token(
    db: DbOption = None,
    data_dir: DataDirOption = None,
    user: Annotated[
        str, typer.Option("--user", help="The provider admin to issue it for (made if missing).")
    ] = "admin",
) -> None:
    """Issue a new provider-admin token and revoke every token the admin had; print it once.

    Works while the server runs: the old tokens are refused on their next request.
    """
    import time

    from gpuaas.service.auth import reset_admin_token
    from gpuaas.service.models.identity import user_name_problem
    from gpuaas.store.db import Database

    problem = user_name_problem(user)
    if problem:
        raise typer.BadParameter(problem, param_hint="--user")
    settings = _settings(db, data_dir)
    _migrate_or_exit(settings.url)
    database = Database(settings.url)
    try:
        with database.session() as session:
            token = reset_admin_token(session, user, time.time())
    finally:
        database.dispose()
    print(f"provider admin token for {user} (the old ones are revoked): {token}", flush=True)
    print(f"log in with:  gpuaas login http://HOST:PORT {token}", flush=True)

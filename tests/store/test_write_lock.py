"""The SQLite writers' file lock (store/write_lock.py): another process holding it keeps this
one's ``serialized_writes`` waiting, and lets it in as soon as it lets go."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

from gpuaas.service.jobs import serialized_writes
from gpuaas.store import write_lock
from gpuaas.store.db import Database

HOLDER = """
import sys, time
from pathlib import Path
from gpuaas.store.write_lock import across_processes
with across_processes(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    released = time.time()
print(f"{released:.6f}", flush=True)
"""


def test_the_lock_file_is_beside_a_database_file(tmp_path: Path) -> None:
    assert write_lock.lock_path(f"sqlite:///{tmp_path / 'a.db'}") == tmp_path / "a.db.writers"
    assert write_lock.lock_path("sqlite://") is None
    assert write_lock.lock_path("sqlite:///:memory:") is None
    assert write_lock.lock_path("postgresql+psycopg://u@h/d") is None


def test_a_writer_waits_for_another_process_and_enters_when_it_lets_go(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    db = Database(url)
    db.upgrade()
    path = write_lock.lock_path(url)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), "0.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        asked = time.time()
        with serialized_writes(db.engine), db.session() as session:
            entered = time.time()
            session.execute(text("INSERT INTO meta (key, value) VALUES ('w', '1')"))
        released = float(holder.stdout.readline())
    finally:
        holder.wait(timeout=30)
        db.dispose()
    assert entered >= released  # it waited for the other process
    assert entered - asked >= 0.3
    assert entered - released < 0.25  # and was let in when the lock was free, not polled for

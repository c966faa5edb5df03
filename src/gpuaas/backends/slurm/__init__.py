"""The Slurm backend: gpuaas decides where a job runs, a real slurmctld runs it there.

``rest`` speaks to slurmrestd (unix socket or JWT over TCP), ``cli`` to the Slurm commands
(sbatch, squeue, scancel, sacct, scontrol), ``version`` says what the Slurm in front of us can
do, ``script`` writes a job's batch script, ``inventory`` turns Slurm's node listing into
gpuaas inventory entries, and ``backend`` is the :class:`~gpuaas.backends.base.Backend` itself.
See ``docs/backends.md`` (## Slurm).
"""

from gpuaas.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]

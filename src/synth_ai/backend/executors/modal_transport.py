"""How the Modal relay talks to where the job runs: put the job's data dir on the volume, start the job function,
look at it, read the job's database back, fetch the final model, cancel.

- `ModalTransport`: the real thing. The app is run detached (`app.run(detach=True)`), so the call outlives the
  relay; the call id is what a restarted backend reattaches with (`modal.FunctionCall.from_id`).
- `EmulatedTransport`: the same protocol with a local folder as the volume and the job function run by
  `python -m synth_ai.backend.executors.modal_transport <job_id> <data_dir>` in its own process group. It is selected
  by SYNTH_AI_MODAL_EMULATE=<folder> (offline tests, and trying the executor without a Modal account); the call id
  is the subprocess's pid, so a restarted backend reattaches to it the same way.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

from synth_ai.backend.executors.modal_container import copy_database
from synth_ai.backend.executors.modal_plan import ModalPlan

EMULATE_ENV = "SYNTH_AI_MODAL_EMULATE"
DB_RELATIVE = "backend/backend.sqlite3"


class Transport(Protocol):
    name: str

    def upload(self, plan: ModalPlan, local_dir: Path) -> None: ...

    def spawn(self, plan: ModalPlan, secrets: dict[str, str]) -> str: ...

    def done(self, call_id: str) -> bool: ...

    def snapshot_db(self, plan: ModalPlan, dest: Path) -> bool: ...

    def download(self, plan: ModalPlan, relative: str, dest: Path) -> None: ...

    def cancel(self, call_id: str) -> None: ...


def transport_for() -> Transport:
    folder = os.environ.get(EMULATE_ENV, "").strip()
    return EmulatedTransport(Path(folder)) if folder else ModalTransport()


class EmulatedTransport:
    name = "emulated"

    def __init__(self, volume: Path) -> None:
        self.volume = volume

    def _dir(self, plan: ModalPlan) -> Path:
        return self.volume / plan.job_id

    def upload(self, plan: ModalPlan, local_dir: Path) -> None:
        shutil.copytree(local_dir, self._dir(plan), dirs_exist_ok=True)

    def spawn(self, plan: ModalPlan, secrets: dict[str, str]) -> str:
        from synth_ai.backend.executors.remote_needs import container_environ

        env = {k: v for k, v in container_environ(secrets).items() if k != "SYNTH_AI_BACKEND_PARENT_PID"}
        log = open(self._dir(plan) / "remote.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen([sys.executable, "-m", __name__, plan.job_id, str(self._dir(plan))], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
        log.close()
        return str(proc.pid)

    def done(self, call_id: str) -> bool:
        pid = int(call_id)
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it
            return finished == pid
        except ChildProcessError:  # not our child (a previous relay started it): is it still there?
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                return True
            return state == "Z"

    def snapshot_db(self, plan: ModalPlan, dest: Path) -> bool:
        source = self._dir(plan) / DB_RELATIVE
        if not source.is_file():
            return False
        copy_database(source, dest)  # a consistent copy while the job writes
        return True

    def download(self, plan: ModalPlan, relative: str, dest: Path) -> None:
        shutil.copytree(self._dir(plan) / relative, dest, dirs_exist_ok=True)

    def cancel(self, call_id: str) -> None:
        try:
            os.killpg(int(call_id), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


class ModalTransport:  # needs a Modal token and the network: not exercised by the offline tests
    name = "modal"

    def upload(self, plan: ModalPlan, local_dir: Path) -> None:
        volume = _volume(plan)
        with volume.batch_upload(force=True) as batch:
            batch.put_directory(str(local_dir), f"/{plan.job_id}")

    def spawn(self, plan: ModalPlan, secrets: dict[str, str]) -> str:
        from synth_ai.backend.executors.modal_plan import build_app

        app, function = build_app(plan, secrets)
        with app.run(detach=True):
            call = function.spawn(plan.job_id, plan.data_dir)
        return str(call.object_id)

    def done(self, call_id: str) -> bool:
        import modal
        from modal.exception import FunctionTimeoutError
        from modal.exception import TimeoutError as NotYet

        try:
            modal.FunctionCall.from_id(call_id).get(timeout=0)
        except FunctionTimeoutError:  # the function ran out of time (a subclass of NotYet): done
            return True
        except (NotYet, TimeoutError):
            return False
        except Exception:  # noqa: BLE001 - failed remotely: done; the job's database says why
            return True
        return True

    def snapshot_db(self, plan: ModalPlan, dest: Path) -> bool:
        from modal.exception import NotFoundError

        volume = _volume(plan)
        try:
            with open(dest, "wb") as handle:
                volume.read_file_into_fileobj(f"/{plan.job_id}/{DB_RELATIVE}", handle)
        except (FileNotFoundError, NotFoundError):  # not committed by the container yet
            return False
        return True

    def download(self, plan: ModalPlan, relative: str, dest: Path) -> None:
        volume = _volume(plan)
        prefix = f"{plan.job_id}/{relative}"
        for entry in volume.iterdir(f"/{prefix}", recursive=True):
            if entry.type.name != "FILE":
                continue
            target = dest / Path(entry.path.lstrip("/")).relative_to(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as handle:
                volume.read_file_into_fileobj(entry.path, handle)

    def cancel(self, call_id: str) -> None:
        import modal

        modal.FunctionCall.from_id(call_id).cancel(terminate_containers=True)


def _volume(plan: ModalPlan) -> Any:
    import modal

    return modal.Volume.from_name(plan.volume, create_if_missing=True)


def main(argv: list[str] | None = None) -> int:
    """The emulated remote container: run the job function on a data dir, as Modal would."""
    args = sys.argv[1:] if argv is None else argv
    from synth_ai.backend.executors.modal_container import remote_job

    result = remote_job(args[0], args[1])
    return 0 if result.get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""The `modal` executor: the job runs in a Modal GPU function (`modal_plan`), and what the scheduler starts here is
its relay (`python -m synth_ai.backend.executors.modal_relay <job_id>`), which submits the job, streams its events
and metrics back, and fetches the model at the end.

Cancel and restart go through the relay: a cancel sets `cancel_requested` and SIGTERMs the relay, which then
cancels the Modal call; the backend going away leaves the call running, and the next relay reattaches to it by the
call id it recorded in the job's folder (`remote.json`), so a job is never submitted twice.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from synth_ai.backend.executors.process_executor import ProcessExecutor
from synth_ai.backend.jobs.launching import Launch
from synth_ai.backend.server_settings import BackendSettings

RELAY_MODULE = "synth_ai.backend.executors.modal_relay"
STATE_FILE = "remote.json"  # in the job's folder: the Modal call the relay follows, and how far it relayed

log = logging.getLogger("synth_ai.backend.scheduler")


class ModalExecutor(ProcessExecutor):
    name = "modal"

    def launch(self, row: Any) -> Launch:
        return Launch(self.name, [sys.executable, "-m", RELAY_MODULE, row["id"]])

    def reattach(self, row: Any, settings: BackendSettings) -> None:
        """Nothing here to stop: the run is the Modal call, and the relay that followed it died with the backend
        (parent-death signal). The relay started next for the job picks the call up from `remote.json`."""
        try:
            call_id = json.loads((settings.job_dir(row["id"]) / STATE_FILE).read_text()).get("call_id")
        except (OSError, ValueError, AttributeError):
            return
        if call_id:
            log.info("job %s: its Modal call %s keeps running; the next relay reattaches to it", row["id"], call_id)

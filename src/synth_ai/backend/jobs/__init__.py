"""Running jobs: the scheduler in the API process (`scheduler`), one worker process per job run (`worker`), the
worker started ahead of its job (`warm_worker`), and the registry of job kinds (`kinds`)."""

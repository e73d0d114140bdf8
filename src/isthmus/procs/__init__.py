"""Process infrastructure: a fork server (the zygote) that starts processes of one Python program
in milliseconds, sharing its imported pages copy-on-write.

Below everything it starts: the caller hands it the preload list and the entry point (an `Entry`,
as `multiprocessing.set_forkserver_preload` is handed its preload), so nothing here imports the
CLI, the local clusterset or a capability. zygote.py is the caller's side (`Zygote`), server.py
the zygote's loop, child.py how a forked child becomes its command (and `fork_command`, a fork
without a zygote), entry.py what the children run.
"""

"""One run: its configuration (:mod:`.config`), the step-size controller and the schedule, the
compiled program, the loop (:mod:`.loop`), checkpoints and the result (:mod:`.simulation`)."""

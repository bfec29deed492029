"""The engine contract (`engine`: the engine; `executor`: what runs work) and what several
engines share: Unix accounts (`accounts`), a job's environment (`jobenv`), reading logs
(`logread`), reruns in one log (`reruns`), a gang's environment (`gangenv`), atomic files
(`files`), the data directory's modes (`datadir`) and flags from options (`options`)."""

"""Background loops: small classes with one job each (see `base.Loop`)."""

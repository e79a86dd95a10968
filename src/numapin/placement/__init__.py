"""Pure policies: facts and a request in, a Placement out (modes, launcher ranks, the plan of a job)."""

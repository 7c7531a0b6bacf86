"""Router service: decides the step plan of a run within what its profile allows."""

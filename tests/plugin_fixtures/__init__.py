"""Small plugin modules that tests load through fake ``synapse`` entry points."""

"""The course's reference inference engine, one module per idea (see README for the map)."""

"""SQLite for the embedded mode: the database's folder is made when a connection opens it."""

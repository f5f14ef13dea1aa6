-- The installation's id (db/installation.go).

-- name: InstallationGet :one
SELECT id FROM installation;

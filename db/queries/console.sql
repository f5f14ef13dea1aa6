-- Console sign-ins (db/console.go). Only the SHA-256 of a cookie token is
-- stored; the API key is sealed.

-- name: ConsoleSessionInsert :exec
INSERT INTO console_sessions (id, token_hash, key_sealed, csrf_token, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: ConsoleSessionGetByHash :one
-- The live sign-in with the token hash: not expired at now.
SELECT * FROM console_sessions
WHERE token_hash = sqlc.arg(token_hash) AND expires_at > sqlc.arg(now)::timestamptz;

-- name: ConsoleSessionDelete :exec
DELETE FROM console_sessions WHERE token_hash = $1;

-- name: ConsoleSessionDeleteExpired :execrows
DELETE FROM console_sessions WHERE expires_at <= sqlc.arg(now)::timestamptz;

-- name: PrincipalCreate :one
INSERT INTO principal (id, tenant, name, roles, key_hash, key_prefix)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(name), sqlc.arg(roles)::text[], sqlc.arg(key_hash), sqlc.arg(key_prefix))
RETURNING *;

-- name: PrincipalByKeyHash :one
SELECT * FROM principal
WHERE key_hash = sqlc.arg(key_hash) AND revoked_at IS NULL;

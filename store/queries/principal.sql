-- name: PrincipalCreate :one
INSERT INTO principal (id, tenant, name, roles, key_hash, key_prefix)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(name), sqlc.arg(roles)::text[], sqlc.arg(key_hash), sqlc.arg(key_prefix))
RETURNING *;

-- name: PrincipalByKeyHash :one
SELECT * FROM principal
WHERE key_hash = sqlc.arg(key_hash) AND revoked_at IS NULL;

-- name: PrincipalList :many
-- A tenant's principals, revoked ones included, oldest first.
SELECT * FROM principal
WHERE tenant = sqlc.arg(tenant)
ORDER BY created_at, id;

-- name: PrincipalGet :one
-- The tenant's principal with this id or this name (pass the other NULL).
SELECT * FROM principal
WHERE tenant = sqlc.arg(tenant)
  AND (id = sqlc.narg(id) OR name = sqlc.narg(name));

-- name: PrincipalRevoke :one
-- Revokes the tenant's principal with this id or this name (pass the other
-- NULL), once: a principal already revoked keeps its first revocation time
-- and matches nothing.
UPDATE principal SET revoked_at = now()
WHERE tenant = sqlc.arg(tenant)
  AND (id = sqlc.narg(id) OR name = sqlc.narg(name))
  AND revoked_at IS NULL
RETURNING *;

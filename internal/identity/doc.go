// Package identity is keel's identity v3 subset: just enough of Keystone's
// API, in Keystone's shapes, for openstackclient, keystoneauth1, gophercloud
// and Tempest's pre-provisioned accounts to log in and find keel's
// endpoints. It is served under the prefix /identity.
//
// Three parts:
//
//   - Directory: the users, projects and role assignments, kept in a JSON
//     file (mode 0600). Passwords are stored as PBKDF2-HMAC-SHA256 hashes
//     (standard library crypto/pbkdf2, 600,000 iterations, 16-byte salt).
//     IDs are 32 hex digits derived from the names, so they are the same
//     after every restart and on every node.
//   - Issuer: stateless tokens. A token is the JSON payload {user_id,
//     project_id, roles, issued_at, expires_at, audit_id} followed by its
//     HMAC-SHA256, in URL-safe base64 without padding. The key is 32 random
//     bytes in DATA_DIR/token.key; nothing is stored per token, so any
//     process holding the key can validate, and rotating the key revokes
//     every token.
//   - HTTP: the version documents, POST/GET/HEAD /identity/v3/auth/tokens,
//     the catalog, Keystone's admin API for users, projects, roles, role
//     assignments and domains (see Handler), and the Require middleware
//     the other APIs use to authenticate requests.
//
// The built-in roles are "admin", "member" and "reader". As in Keystone's
// default implied-role chain, admin implies member and member implies
// reader; a token lists the effective roles. Roles an admin creates are
// carried in tokens and imply nothing; keel's policies read only the
// built-in ones.
//
// Errors use Keystone's shape, {"error": {"code", "message", "title"}}.
package identity

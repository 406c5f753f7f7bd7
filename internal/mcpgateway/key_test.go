package mcpgateway_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/internal/mcpgateway"
)

// TestDeriveKey: the derived key is the documented hash of the canonical
// {session, tool, tool_version, args} (a vector computed independently, in
// Python, from the JCS bytes), blind to the arguments' key order and
// number spelling, and different when any part differs.
func TestDeriveKey(t *testing.T) {
	t.Parallel()
	args := func(s string) *structpb.Struct {
		v := &structpb.Struct{}
		require.NoError(t, protojson.Unmarshal([]byte(s), v))
		return v
	}
	k, err := mcpgateway.DeriveKey("s1", "t", "1", args(`{"b":"x","a":1.0}`))
	require.NoError(t, err)
	// sha256(`{"args":{"a":1,"b":"x"},"session":"s1","tool":"t","tool_version":"1"}`)
	require.Equal(t, "mcp1-3bE0celnMF0f8dBZmRQ2IAWM3G3aGD0vGVyDugSi6so", k)
	same, err := mcpgateway.DeriveKey("s1", "t", "1", args(`{"a":1,"b":"x"}`))
	require.NoError(t, err)
	require.Equal(t, k, same)
	for _, other := range []struct{ session, tool, version, args string }{
		{"s2", "t", "1", `{"a":1,"b":"x"}`},
		{"s1", "u", "1", `{"a":1,"b":"x"}`},
		{"s1", "t", "2", `{"a":1,"b":"x"}`},
		{"s1", "t", "1", `{"a":2,"b":"x"}`},
	} {
		o, err := mcpgateway.DeriveKey(other.session, other.tool, other.version, args(other.args))
		require.NoError(t, err)
		require.NotEqual(t, k, o, "%+v", other)
	}
	require.Len(t, k, 48, "within the ledger's 255 printable characters")
}

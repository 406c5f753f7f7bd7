package interceptors_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/reason"
)

// FuzzValidateKey: any metadata values are either accepted as exactly one
// printable-ASCII key of 1 to 255 bytes, or refused with INVALID_ARGUMENT
// and an ErrorInfo; never a panic.
func FuzzValidateKey(f *testing.F) {
	f.Add("invoice-2048", "")
	f.Add("", "")
	f.Add("clé", "")
	f.Add("a", "b")
	f.Add(" padded ", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		values := []string{a}
		if b != "" {
			values = append(values, b)
		}
		key, err := interceptors.ValidateKey(values)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || reason.Of(err) == "" {
				t.Fatalf("refusal %v is not INVALID_ARGUMENT with a reason", err)
			}
			return
		}
		if len(values) != 1 || key != a || len(key) == 0 || len(key) > interceptors.MaxIdempotencyKeyLen {
			t.Fatalf("accepted %q from %q", key, values)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted a non-printable byte in %q", key)
			}
		}
	})
}

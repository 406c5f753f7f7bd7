// Package require is the small subset of testify's require that the client
// module's tests use, on the standard library only: the module depends on
// grpc, protobuf and genproto and nothing else, not even for its tests,
// so that a program using the client gets no other module in its go.sum.
// Each function stops the test (t.FailNow) when its check fails.
package require

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func fail(t testing.TB, msgAndArgs []any, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if len(msgAndArgs) > 0 {
		if f, ok := msgAndArgs[0].(string); ok {
			msg += "\n" + fmt.Sprintf(f, msgAndArgs[1:]...)
		} else {
			msg += "\n" + fmt.Sprint(msgAndArgs...)
		}
	}
	t.Fatal(msg)
}

func equal(want, got any) bool {
	if w, ok := want.([]byte); ok {
		g, ok := got.([]byte)
		return ok && bytes.Equal(w, g)
	}
	return reflect.DeepEqual(want, got)
}

// Equal checks that got equals want (reflect.DeepEqual; bytes.Equal for []byte).
func Equal(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !equal(want, got) {
		fail(t, msgAndArgs, "not equal:\nwant %#v\n got %#v", want, got)
	}
}

// NotEqual checks that got differs from want.
func NotEqual(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	if equal(want, got) {
		fail(t, msgAndArgs, "should differ, both are %#v", got)
	}
}

// NoError checks that err is nil.
func NoError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		fail(t, msgAndArgs, "unexpected error: %v", err)
	}
}

// Error checks that err is not nil.
func Error(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, msgAndArgs, "expected an error, got nil")
	}
}

// ErrorIs checks errors.Is(err, target).
func ErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, msgAndArgs, "error %v is not %v", err, target)
	}
}

// ErrorAs checks errors.As(err, target).
func ErrorAs(t testing.TB, err error, target any, msgAndArgs ...any) {
	t.Helper()
	if !errors.As(err, target) {
		fail(t, msgAndArgs, "error %v is not a %T", err, target)
	}
}

// True checks that v is true.
func True(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	if !v {
		fail(t, msgAndArgs, "should be true")
	}
}

// Truef is True with a format.
func Truef(t testing.TB, v bool, format string, args ...any) {
	t.Helper()
	True(t, v, append([]any{format}, args...)...)
}

// False checks that v is false.
func False(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	if v {
		fail(t, msgAndArgs, "should be false")
	}
}

func length(v any) (int, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		return rv.Len(), true
	}
	return 0, false
}

// Len checks that v (a slice, map, string, array or channel) has n elements.
func Len(t testing.TB, v any, n int, msgAndArgs ...any) {
	t.Helper()
	if l, ok := length(v); !ok || l != n {
		fail(t, msgAndArgs, "want length %d, got %#v", n, v)
	}
}

func empty(v any) bool {
	if v == nil {
		return true
	}
	if l, ok := length(v); ok {
		return l == 0
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		return rv.IsNil()
	}
	return rv.IsZero()
}

// Empty checks that v is nil, zero or has no elements.
func Empty(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if !empty(v) {
		fail(t, msgAndArgs, "should be empty: %#v", v)
	}
}

// NotEmpty checks that v is neither nil, zero nor without elements.
func NotEmpty(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if empty(v) {
		fail(t, msgAndArgs, "should not be empty: %#v", v)
	}
}

// NotNil checks that v is not nil (nor a nil pointer, map, slice …).
func NotNil(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if v == nil {
		fail(t, msgAndArgs, "should not be nil")
		return
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			fail(t, msgAndArgs, "should not be nil: %T", v)
		}
	}
}

// Contains checks that s (a string, a slice or a map's keys) contains elem.
func Contains(t testing.TB, s, elem any, msgAndArgs ...any) {
	t.Helper()
	rv := reflect.ValueOf(s)
	switch rv.Kind() {
	case reflect.String:
		if e, ok := elem.(string); ok && strings.Contains(rv.String(), e) {
			return
		}
	case reflect.Slice, reflect.Array:
		for i := range rv.Len() {
			if equal(rv.Index(i).Interface(), elem) {
				return
			}
		}
	case reflect.Map:
		for _, k := range rv.MapKeys() {
			if equal(k.Interface(), elem) {
				return
			}
		}
	}
	fail(t, msgAndArgs, "%#v does not contain %#v", s, elem)
}

// GreaterOrEqual checks a >= b for integers.
func GreaterOrEqual(t testing.TB, a, b int, msgAndArgs ...any) {
	t.Helper()
	if a < b {
		fail(t, msgAndArgs, "want %d >= %d", a, b)
	}
}

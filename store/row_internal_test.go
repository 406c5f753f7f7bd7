package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/store/internal/db"
)

// TestClaimRowCarriesEveryColumn: claimedRow copies every column of the
// operation table (db.Operation, which sqlc derives from the migrations)
// from OperationClaim's row: each field set to a value of its own comes
// out equal, so a column added to the table and not to the copy fails
// here rather than reading as a zero value.
func TestClaimRowCarriesEveryColumn(t *testing.T) {
	var in db.OperationClaimRow
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.Uint8 {
				f.SetBytes([]byte(`"` + v.Type().Field(i).Name + `"`))
			} else {
				f.Set(reflect.ValueOf([]string{v.Type().Field(i).Name}))
			}
		case reflect.Struct:
			// pgtype values: Valid plus a payload.
			if vf := f.FieldByName("Valid"); vf.IsValid() {
				vf.SetBool(true)
			}
			for j := range f.NumField() {
				switch g := f.Field(j); g.Kind() {
				case reflect.String:
					g.SetString("s" + v.Type().Field(i).Name)
				case reflect.Int64, reflect.Int32:
					g.SetInt(int64(i + 1))
				}
			}
			if tf := f.FieldByName("Time"); tf.IsValid() {
				tf.Set(reflect.ValueOf(timeAt(i)))
			}
		}
	}
	want := reflect.ValueOf(in)
	row := reflect.New(reflect.TypeFor[db.Operation]()).Elem()
	for i := range row.NumField() {
		name := row.Type().Field(i).Name
		src := want.FieldByName(name)
		require.Truef(t, src.IsValid(), "OperationClaimRow lacks the column %s", name)
		row.Field(i).Set(src)
	}
	require.Equal(t, withNow(row.Interface().(db.Operation), in.DbNow), claimedRow(in),
		"claimedRow must copy every column of the operation table")
}

func timeAt(i int) time.Time { return time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC) }

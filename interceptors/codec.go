package interceptors

import (
	"strings"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/reason"
)

// requestCodec is the server's codec: protobuf's, except for a request
// that does not decode (cut short, a wire type that does not fit its
// field, a string that is not UTF-8). grpc-go answers such a request
// INTERNAL, with no ErrorInfo, before any interceptor runs, so the call
// would be neither logged, counted nor answered as the bad input it is.
// requestCodec instead hands the handler an empty message marked with why
// (undecodableMark), and the validate link answers FIELD_INVALID once the
// caller is authenticated, as for any other malformed field.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec { return requestCodec{encoding.GetCodecV2(protocodec.Name)} }

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(mark, undecodablePrefix+err.Error()))
	return nil
}

// The mark of a request that did not decode: an unknown field, of the
// largest number protobuf allows, that holds undecodablePrefix and the
// decoder's error. A client that sends it itself only gets the refusal.
const (
	undecodableField  = protowire.MaxValidNumber
	undecodablePrefix = "opledger: undecodable request: "
)

// undecodable returns the refusal of a request requestCodec marked, or nil.
func undecodable(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	u := m.ProtoReflect().GetUnknown()
	if len(u) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != undecodableField || typ != protowire.BytesType {
		return nil
	}
	why, n2 := protowire.ConsumeString(u[n:])
	if n2 < 0 || !strings.HasPrefix(why, undecodablePrefix) {
		return nil
	}
	name := string(m.ProtoReflect().Descriptor().FullName())
	return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID,
		"the request is not a well-formed "+name+": "+strings.TrimPrefix(why, undecodablePrefix), nil)
}

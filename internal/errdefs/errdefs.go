// Package errdefs holds crimux's error classes and their one translation to
// gRPC status codes. Code below the CRI boundary wraps these sentinels with
// %w and a message naming the field or ID at fault; the CRI and VM API
// servers turn them into gRPC codes in one interceptor (ToGRPC). Errors that
// already carry a gRPC status (from a downstream runtime) keep their code.
package errdefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error classes. Wrap them: fmt.Errorf("pod_sandbox_id %q: %w", id, ErrNotFound).
var (
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrUnimplemented      = errors.New("not implemented")
	// ErrResourceExhausted: a cap of the node's was reached (VM
	// identities, agent calls, snapshots); retrying later may succeed.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrBusy is a ResourceExhausted of a cap full of work that is being
	// done (guest-agent calls that are answered), not of work that is
	// stuck: a caller that can wait may ask again at once.
	ErrBusy = fmt.Errorf("busy: %w", ErrResourceExhausted)
	// ErrAborted: an operation between nodes (a live migration) failed on
	// its way and was undone; the object is as it was before.
	ErrAborted = errors.New("aborted")
)

var classes = []struct {
	err  error
	code codes.Code
}{
	{ErrInvalidArgument, codes.InvalidArgument},
	{ErrNotFound, codes.NotFound},
	{ErrAlreadyExists, codes.AlreadyExists},
	{ErrFailedPrecondition, codes.FailedPrecondition},
	{ErrUnavailable, codes.Unavailable},
	{ErrUnimplemented, codes.Unimplemented},
	{ErrResourceExhausted, codes.ResourceExhausted},
	{ErrAborted, codes.Aborted},
	// A full disk (the state dir's filesystem, a volume) or a quota: the
	// node has no room now; freeing some lets the call succeed.
	{syscall.ENOSPC, codes.ResourceExhausted},
	{syscall.EDQUOT, codes.ResourceExhausted},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// Code classifies err: a wrapped sentinel first, then a gRPC status carried
// anywhere in the chain, else Unknown. nil is OK.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return codes.Unknown
}

// ToGRPC turns err into a gRPC status error with Code(err) and err's full
// message. A bare downstream status passes through unchanged (same code,
// message and details).
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	return status.Error(Code(err), message(err))
}

// message strips the "rpc error: code = X desc = " noise of wrapped
// downstream statuses so the client sees one readable sentence.
func message(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		inner := se.(error)
		if s := se.GRPCStatus(); s != nil && inner.Error() != err.Error() {
			return strings.Replace(err.Error(), inner.Error(), s.Message(), 1)
		}
	}
	return err.Error()
}

// IsNotFound reports whether err means the object does not exist.
func IsNotFound(err error) bool { return Code(err) == codes.NotFound }

// IsUnavailable reports whether err means the runtime could not be reached.
func IsUnavailable(err error) bool { return Code(err) == codes.Unavailable }

// Invalid is a shorthand for an InvalidArgument naming a field.
func Invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidArgument)
}

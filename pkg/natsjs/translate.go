package natsjs

import (
	"errors"
	"fmt"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// translate maps broker errors to errs sentinels; others pass through.
// "No answer now", a connection down and a closed connection are
// errs.ErrUnavailable.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if transient(err) || unreachable(err) {
		return fmt.Errorf("%w: %v", errs.ErrUnavailable, err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, errCodeWrongLastSubjectSeq:
			return fmt.Errorf("%w: %v", errs.ErrConflict, err)
		case errCodeBatchDuplicateID, errCodeDuplicateConflict:
			return fmt.Errorf("%w: %v", errs.ErrDuplicate, err)
		case jetstream.JSErrCodeMessageNotFound:
			return errs.ErrNotFound
		case jetstream.JSErrCodeStreamMessageExceedsMaximum:
			return fmt.Errorf("%w: %v", errs.ErrTooLarge, err)
		case jetstream.JSErrCodeMaximumConsumersLimit:
			return fmt.Errorf("%w: the stream has as many consumers as it takes (max_consumers): %v", errs.ErrLimit, err)
		}
	}
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %v", errs.ErrTooLarge, err)
	case errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%w: %v", errs.ErrConflict, err)
	case errors.Is(err, jetstream.ErrMsgNotFound), errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrConsumerNotFound):
		return errs.ErrNotFound
	}
	return err
}

// JetStream error codes translate reads besides nats.go's named ones.
const (
	errCodeWrongLastSubjectSeq = 10164 // wrong last sequence for subject (replicated streams)
	errCodeBatchDuplicateID    = 10201 // atomic publish batch contains a duplicate message id
	errCodeDuplicateConflict   = 10158 // duplicate message id still in process (a copy being stored)
)

package ordered

import (
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs raised by the schema's functions.
const (
	codeLateEvent        = "ORD01"
	codeReplayOutOfOrder = "ORD02"
	codeLaterJobRunning  = "ORD03"
	codeNotFailed        = "ORD04"
	codeDuplicate        = "ORD05"
	codeLeaseLost        = "ORD06"
	codeInvalidEvent     = "ORD07"
)

// fieldError is the error shape of database/sql drivers other than pgx (bun's pgdriver).
type fieldError interface {
	Field(byte) string
}

// mapDBError turns the schema's own SQLSTATEs into the package's errors. The Index of a
// conflicting duplicate or an invalid event is its position in what was sent
// (encodedBatch.dbError maps it to the batch's).
func mapDBError(err error) error {
	var code, message, detail string
	var pgErr *pgconn.PgError
	var fe fieldError
	switch {
	case errors.As(err, &pgErr):
		code, message, detail = pgErr.Code, pgErr.Message, pgErr.Detail
	case errors.As(err, &fe):
		code, message, detail = fe.Field('C'), fe.Field('M'), fe.Field('D')
	default:
		return err
	}
	switch code {
	case codeLateEvent:
		late := &LateEventError{LaterSeq: -1}
		var d struct {
			Key      string `json:"key"`
			Seq      int64  `json:"seq"`
			LaterSeq *int64 `json:"later_seq"`
		}
		if json.Unmarshal([]byte(detail), &d) == nil {
			late.Key, late.Seq = d.Key, d.Seq
			if d.LaterSeq != nil {
				late.LaterSeq = *d.LaterSeq
			}
		}
		return late
	case codeDuplicate:
		dup := &DuplicateConflictError{Index: -1, Stored: true}
		var d struct {
			Ord    int    `json:"ord"`
			Key    string `json:"key"`
			Seq    int64  `json:"seq"`
			Field  string `json:"field"`
			Stored *bool  `json:"stored"`
		}
		if json.Unmarshal([]byte(detail), &d) == nil {
			dup.Index, dup.Key, dup.Seq, dup.Field = d.Ord-1, d.Key, d.Seq, d.Field
			if d.Stored != nil {
				dup.Stored = *d.Stored
			}
		}
		return dup
	case codeInvalidEvent:
		invalid := &InvalidEventError{Index: -1, Reason: message}
		var d struct {
			Ord     int    `json:"ord"`
			Key     string `json:"key"`
			Seq     int64  `json:"seq"`
			Field   string `json:"field"`
			Problem string `json:"problem"`
		}
		if json.Unmarshal([]byte(detail), &d) == nil {
			invalid.Index, invalid.Key, invalid.Seq, invalid.Field, invalid.Reason = d.Ord-1, d.Key, d.Seq, d.Field, d.Problem
		}
		return invalid
	case codeReplayOutOfOrder:
		return &schemaError{kind: ErrReplayOutOfOrder, msg: message}
	case codeLaterJobRunning:
		return &schemaError{kind: ErrLaterJobRunning, msg: message}
	case codeNotFailed:
		return &schemaError{kind: ErrNotFailed, msg: message}
	case codeLeaseLost:
		return &schemaError{kind: ErrLeaseLost, msg: message}
	}
	return err
}

// isTransient reports whether err is a failure that the same statement may not meet again:
// a deadlock, a serialization failure or a lock not available.
func isTransient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40P01", "40001", "55P03":
		return true
	}
	return false
}

// schemaError carries the database's message (which names the job and key) and matches its
// sentinel with errors.Is.
type schemaError struct {
	kind error
	msg  string
}

func (e *schemaError) Error() string { return e.msg }
func (e *schemaError) Unwrap() error { return e.kind }

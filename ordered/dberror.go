package ordered

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/schema"
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
	codeSequenceMismatch = "ORD08"
	codeNotContiguous    = "ORD09"
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
			Key        string `json:"key"`
			Seq        int64  `json:"seq"`
			LaterSeq   *int64 `json:"later_seq"`
			Contiguous bool   `json:"contiguous"`
		}
		if json.Unmarshal([]byte(detail), &d) == nil {
			late.Key, late.Seq, late.Contiguous = d.Key, d.Seq, d.Contiguous
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
	case codeSequenceMismatch:
		mismatch := &SequenceMismatchError{msg: message}
		var d struct {
			Key        string `json:"key"`
			Contiguous bool   `json:"contiguous"`
		}
		if json.Unmarshal([]byte(detail), &d) == nil {
			mismatch.Key, mismatch.Contiguous = d.Key, d.Contiguous
		}
		return mismatch
	case codeNotContiguous:
		return &schemaError{kind: ErrNotContiguous, msg: message}
	case codeUndefinedTable, codeUndefinedFunction, codeUndefinedObject:
		// The queue's own tables, functions or types missing: the search_path finds no
		// migrated queue.
		if strings.Contains(message, "ordered_") {
			return fmt.Errorf("%w: %w", schema.ErrNotMigrated, err)
		}
	}
	return err
}

// The SQLSTATEs of a missing table, function, and type.
const (
	codeUndefinedTable    = "42P01"
	codeUndefinedFunction = "42883"
	codeUndefinedObject   = "42704"
)

// codeReadOnly is read_only_sql_transaction: the session's server takes no writes.
const codeReadOnly = "25006"

// isTransient reports whether err is a failure that the same statement may not meet again:
// a deadlock, a serialization failure, a lock not available, or a session on a server that
// takes no writes (resetIfReadOnly has closed it, and the next try runs on a new one).
func isTransient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40P01", "40001", "55P03", codeReadOnly:
		return true
	}
	return false
}

// isReadOnly reports whether err says that the statement's server takes no writes: a standby,
// or a primary demoted in place (default_transaction_read_only). None of the package's own
// statements runs in a read-only transaction, so it is the server, not the statement.
func isReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeReadOnly
}

// resetIfReadOnly closes every session of pool when err says that the server of one of them
// takes no writes. Such a session stays on that server, and the pool would hand it out again
// and again: this way idle sessions close at once and busy ones when they are released, and
// the next statement connects anew, which with target_session_attrs=read-write in the URL
// reaches the server that takes writes now. The other sessions may be on the same server.
func resetIfReadOnly(pool *pgxpool.Pool, err error) {
	if pool != nil && isReadOnly(err) {
		pool.Reset()
	}
}

// schemaError carries the database's message (which names the job and key) and matches its
// sentinel with errors.Is.
type schemaError struct {
	kind error
	msg  string
}

func (e *schemaError) Error() string { return e.msg }
func (e *schemaError) Unwrap() error { return e.kind }

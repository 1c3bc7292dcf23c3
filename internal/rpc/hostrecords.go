package rpc

import (
	"keel/internal/records"
	"keel/internal/store"
)

// hostRecordWriter writes the host records the agents send (their audits'
// and their metrics reports, one every 10 s per host). With a store that
// batches (store.HostRecordBatch), the records that arrive together are
// written in one transaction, and of two from one host only the newer
// (a record replaces the older one whole); with any other store, each is
// its own PutHostRecord. Either way an agent's call returns once its
// record is committed.
type hostRecordWriter struct {
	*groupCommit[records.HostRecord]
	batch store.HostRecordBatch // nil: one write per record
}

func newHostRecordWriter(st ServedStore) *hostRecordWriter {
	b, _ := st.(store.HostRecordBatch)
	g := &groupCommit[records.HostRecord]{
		key:      func(h records.HostRecord) string { return h.Host },
		coalesce: true,
		gather:   batchGather,
		writeOne: st.PutHostRecord,
	}
	if b != nil {
		g.writeMany = b.PutHostRecords
	}
	return &hostRecordWriter{groupCommit: g, batch: b}
}

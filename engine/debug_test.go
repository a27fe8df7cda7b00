package engine

import (
	"fmt"
	"reflect"
)

// protoDump formats the protocol's per-sender state (unexported fields,
// through reflection) for failure messages.
func protoDump(m *Member) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := reflect.ValueOf(m.proto).Elem()
	out := ""
	ord := v.FieldByName("order")
	for i := 0; i < ord.Len(); i++ {
		s := ord.Index(i).Elem()
		out += fmt.Sprintf("  m=%v highest=%v contig=%v floor=%v state=%v armed=%v nakAt=%v backoff=%v\n",
			s.FieldByName("m"), s.FieldByName("highest"), s.FieldByName("contig"), s.FieldByName("floor"),
			s.FieldByName("state"), s.FieldByName("armed"), s.FieldByName("nakAt"), s.FieldByName("backoff"))
	}
	out += fmt.Sprintf("  highestAt=%v stableAt=%v now=%v\n", v.FieldByName("highestAt"), v.FieldByName("stableAt"), m.now())
	return out
}

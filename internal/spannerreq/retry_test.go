package spannerreq

import "testing"

func TestSplitRequestID(t *testing.T) {
	for _, tc := range []struct {
		id, key string
		retry   bool
	}{
		{"1.feedbeef.1.1.7.1", "1.feedbeef.1.1.7", false},
		{"1.feedbeef.1.1.7.2", "1.feedbeef.1.1.7", true},
		{"1.feedbeef.1.1.7.12", "1.feedbeef.1.1.7", true},
		{"", "", false},
		{"nodots", "", false},
		{"1.a.", "1.a", false},
	} {
		key, retry := SplitRequestID(tc.id)
		if key != tc.key || retry != tc.retry {
			t.Errorf("SplitRequestID(%q) = %q, %v; want %q, %v", tc.id, key, retry, tc.key, tc.retry)
		}
	}
	var sink string
	if n := testing.AllocsPerRun(100, func() { sink, _ = SplitRequestID("1.feedbeef.1.1.7.2") }); n != 0 || sink == "" {
		t.Errorf("SplitRequestID allocates %v times", n)
	}
}

package spoke

import (
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func query(t *testing.T, id uint16, qs ...dnsmessage.Question) []byte {
	t.Helper()
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true}, Questions: qs}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAnswerDNS: every A query gets loopback, whatever the name; nothing
// else gets an address; malformed or unusual messages get an error code
// or no answer at all.
func TestAnswerDNS(t *testing.T) {
	name := dnsmessage.MustNewName("api.example.com.")
	tests := []struct {
		name    string
		query   []byte
		drop    bool
		rcode   dnsmessage.RCode
		answerA bool
	}{
		{name: "A", query: query(t, 7, dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}), answerA: true},
		{name: "A of an undeclared name", query: query(t, 8, dnsmessage.Question{Name: dnsmessage.MustNewName("exfil.example.org."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}), answerA: true},
		{name: "AAAA: no IPv6", query: query(t, 9, dnsmessage.Question{Name: name, Type: dnsmessage.TypeAAAA, Class: dnsmessage.ClassINET})},
		{name: "TXT", query: query(t, 10, dnsmessage.Question{Name: name, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET})},
		{name: "two questions", query: query(t, 11,
			dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
			dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}), rcode: dnsmessage.RCodeNotImplemented},
		{name: "garbage", query: []byte{1, 2, 3}, drop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, ok := answerDNS(tt.query)
			if ok == tt.drop {
				t.Fatalf("answered %v, want %v", ok, !tt.drop)
			}
			if tt.drop {
				return
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatal(err)
			}
			var q dnsmessage.Message
			_ = q.Unpack(tt.query)
			if !m.Response || m.ID != q.ID || m.RCode != tt.rcode {
				t.Fatalf("header %+v", m.Header)
			}
			if !tt.answerA {
				if len(m.Answers) != 0 {
					t.Fatalf("answers %v, want none", m.Answers)
				}
				return
			}
			if len(m.Answers) != 1 {
				t.Fatalf("answers %v", m.Answers)
			}
			a, ok := m.Answers[0].Body.(*dnsmessage.AResource)
			if !ok || a.A != [4]byte{127, 0, 0, 1} || m.Answers[0].Header.Name != q.Questions[0].Name {
				t.Fatalf("answer %v", m.Answers[0])
			}
		})
	}
}

package incushost

import "testing"

func TestAddressesStayInLoopbackBlocks(t *testing.T) {
	for n, want := range map[int]string{1: "127.0.1.1", 250: "127.0.1.250", 251: "127.0.2.1", 600: "127.0.3.100"} {
		if got := ipFor(0, n); got != want {
			t.Errorf("ipFor(%d) = %s, want %s", n, got, want)
		}
		s := &Server{nextIP: 1}
		s.useIP(want)
		if s.nextIP != n+1 {
			t.Errorf("after useIP(%s) the next is %d, want %d", want, s.nextIP, n+1)
		}
	}
	// Another block: its own addresses, and another block's are not its.
	if got := ipFor(42, 251); got != "127.42.2.1" {
		t.Errorf("ipFor(42, 251) = %s", got)
	}
	s := &Server{nextIP: 1, opts: Options{AddressBlock: 42}}
	s.useIP("127.0.1.9")
	s.useIP("127.42.1.3")
	if s.nextIP != 4 {
		t.Errorf("block 42 after useIP of 127.0.1.9 and 127.42.1.3: next %d, want 4", s.nextIP)
	}
}

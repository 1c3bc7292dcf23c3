package clock

import (
	"testing"
	"time"
)

func TestVirtualRunsInTimeThenSchedulingOrder(t *testing.T) {
	v := NewVirtual(Epoch)
	var got []string
	v.AfterFunc(2*time.Second, func() { got = append(got, "b") })
	v.AfterFunc(time.Second, func() {
		got = append(got, "a")
		v.AfterFunc(time.Second, func() { got = append(got, "c") }) // same instant as b, scheduled later
	})
	stopped := v.AfterFunc(1500*time.Millisecond, func() { got = append(got, "never") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending call reported false")
	}
	v.Advance(5 * time.Second)
	want := []string{"a", "b", "c"}
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	if d := v.Now().Sub(Epoch); d != 5*time.Second {
		t.Fatalf("clock at +%v, want +5s", d)
	}
	if stopped.Stop() {
		t.Fatal("second Stop reported true")
	}
}

func TestVirtualRunUntilLeavesLaterCalls(t *testing.T) {
	v := NewVirtual(Epoch)
	ran := 0
	v.AfterFunc(10*time.Second, func() { ran++ })
	v.RunUntil(Epoch.Add(9 * time.Second))
	if ran != 0 || v.Pending() != 1 {
		t.Fatalf("ran=%d pending=%d, want 0 and 1", ran, v.Pending())
	}
	v.RunUntil(Epoch.Add(10 * time.Second))
	if ran != 1 {
		t.Fatalf("call due exactly at until did not run")
	}
}

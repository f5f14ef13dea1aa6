package broadcast

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNotifyWakesOnlyItsKey(t *testing.T) {
	t.Parallel()
	var k Keyed
	a, b := k.Wait("env_a"), k.Wait("env_b")
	k.Notify("env_a:17")
	if !closed(a) {
		t.Fatal("a notification for env_a did not wake its waiter")
	}
	if closed(b) {
		t.Fatal("a notification for env_a woke the waiter of env_b")
	}
	if again := k.Wait("env_a"); closed(again) {
		t.Fatal("a wait taken after the notification is already closed: it must wait for the next one")
	}
}

func TestGapWakesEveryone(t *testing.T) {
	t.Parallel()
	var k Keyed
	a, b := k.Wait("x"), k.Wait("y")
	k.Gap()
	if !closed(a) || !closed(b) {
		t.Fatal("a gap must wake every waiter")
	}
}

func TestTeeHandsOnToEach(t *testing.T) {
	t.Parallel()
	var k1, k2 Keyed
	w1, w2 := k1.Wait("s"), k2.Wait("s")
	Tee(&k1, &k2).Notify("s")
	if !closed(w1) || !closed(w2) {
		t.Fatal("Tee did not hand the notification to both handlers")
	}
	w1, w2 = k1.Wait("s"), k2.Wait("s")
	Tee(&k1, &k2).Gap()
	if !closed(w1) || !closed(w2) {
		t.Fatal("Tee did not hand the gap to both handlers")
	}
}

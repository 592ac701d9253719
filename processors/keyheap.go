package processors

// keyHeap orders keys by their next pending close time, then by key, so
// closing is O(1) when a trade crosses no boundary and the emission order
// across keys is deterministic (a restored aggregator emits in the same order).
type keyHeap []*keyState

func (h keyHeap) less(i, j int) bool {
	a, b := h[i], h[j]
	if a.pending != b.pending {
		return a.pending < b.pending
	}
	return a.key < b.key
}

func (h keyHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}

func (h *keyHeap) push(k *keyState) {
	k.hidx = len(*h)
	*h = append(*h, k)
	h.up(k.hidx)
}

func (h *keyHeap) remove(k *keyState) {
	i := k.hidx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	k.hidx = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the order after the key at i changed its pending time.
func (h keyHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h keyHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h keyHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

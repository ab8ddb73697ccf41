test-y += test_ring
test_ring-objs := test_ring.o
test_ring-libs := lib/built-in.a
test_ring-ldlibs := -lcmocka -lpthread

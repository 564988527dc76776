/* The network's ceiling between MPI ranks, as fio-ceiling.sh is the drives': for every rank
 * r >= 1 and each message size, the round-trip time of a ping-pong with rank 0 (median and
 * minimum over the round trips) and the one-way streaming bandwidth (rank 0 sends a window of
 * messages back to back, r answers with one byte once all arrived). Ranks are tested one at a
 * time, so each figure is one link's alone. Bounded: each (rank, size) test runs about --seconds
 * (default 1; at least 5 round trips and 4 streamed messages) after 4 warm-up round trips, and at
 * most --iters round trips.
 *
 *   mpirun -n N mpi_pingpong [--sizes 8,28676,229408,1835264] [--seconds S] [--iters K]
 *
 * Prints on rank 0, one line per (rank, size), key=value:
 *   peer=R host=H bytes=B iters=K rtt_us_median=.. rtt_us_min=.. pingpong_gbit_s=.. stream_gbit_s=..
 * pingpong_gbit_s = 2 * B * 8 / median RTT (both directions' bytes over the round trip);
 * stream_gbit_s = window * B * 8 / the window's time. H is the rank's $DELTAFIN_HOST (set by
 * scripts/hosts-agent.sh inside a network namespace), else its processor name.
 * Built by k3-public-bench/run-hosts-bench.sh with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_CTRL = 1, TAG_PING = 2, TAG_STREAM = 3, MAX_SIZES = 32, NAME_LEN = 128 };

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int parse_sizes(const char *text, long *sizes) {
  int n = 0;
  const char *p = text;
  while (*p && n < MAX_SIZES) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v <= 0 || v > (1L << 30)) return -1;
    sizes[n++] = v;
    if (*end == ',') end++;
    else if (*end) return -1;
    p = end;
  }
  return *p ? -1 : n;
}

static void usage_exit(int rank, const char *why) {
  if (rank == 0) fprintf(stderr, "mpi_pingpong: %s\nusage: mpi_pingpong [--sizes B,B,...] [--seconds S] [--iters K]\n", why);
  MPI_Finalize();
  exit(1);
}

/* rank 0's side of one (peer, size) test; the peer mirrors it in serve_peer */
static void measure(int peer, long bytes, char *buf, double seconds, int max_iters, const char *host) {
  int ctrl[2];
  MPI_Status st;
  /* warm-up: the first round trip (which may open the connection) untimed, then 3 that
     estimate the RTT */
  ctrl[0] = 4; ctrl[1] = 0;
  MPI_Send(ctrl, 2, MPI_INT, peer, TAG_CTRL, MPI_COMM_WORLD);
  double t0 = 0;
  for (int i = 0; i < 4; i++) {
    if (i == 1) t0 = MPI_Wtime();
    MPI_Send(buf, (int)bytes, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
    MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, &st);
  }
  double rtt_guess = (MPI_Wtime() - t0) / 3;
  int iters = rtt_guess > 0 ? (int)(seconds * 0.5 / rtt_guess) : max_iters;
  if (iters < 5) iters = 5;
  if (iters > max_iters) iters = max_iters;
  int window = rtt_guess > 0 ? (int)(seconds * 0.5 / rtt_guess) : 64;
  if (window < 4) window = 4;
  if (window > 256) window = 256;
  if ((double)window * bytes > 256.0 * 1048576) window = (int)(256.0 * 1048576 / bytes) + 1;
  ctrl[0] = iters; ctrl[1] = window;
  MPI_Send(ctrl, 2, MPI_INT, peer, TAG_CTRL, MPI_COMM_WORLD);
  double *rtt = malloc(sizeof(double) * iters);
  for (int i = 0; i < iters; i++) {
    double a = MPI_Wtime();
    MPI_Send(buf, (int)bytes, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
    MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, &st);
    rtt[i] = MPI_Wtime() - a;
  }
  qsort(rtt, iters, sizeof(double), compare_doubles);
  double median = iters % 2 ? rtt[iters / 2] : (rtt[iters / 2 - 1] + rtt[iters / 2]) / 2;
  /* streaming: the same buffer sent window times (the receiver overwrites its own) */
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * window);
  char ack;
  double s0 = MPI_Wtime();
  for (int i = 0; i < window; i++) MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, TAG_STREAM, MPI_COMM_WORLD, &reqs[i]);
  MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
  MPI_Recv(&ack, 1, MPI_BYTE, peer, TAG_STREAM, MPI_COMM_WORLD, &st);
  double stream_s = MPI_Wtime() - s0;
  printf("peer=%d host=%s bytes=%ld iters=%d rtt_us_median=%.1f rtt_us_min=%.1f pingpong_gbit_s=%.3f "
         "window=%d stream_gbit_s=%.3f\n",
         peer, host, bytes, iters, median * 1e6, rtt[0] * 1e6, 2.0 * bytes * 8 / median / 1e9, window,
         (double)window * bytes * 8 / stream_s / 1e9);
  fflush(stdout);
  free(reqs);
  free(rtt);
}

/* a receive that sleeps between polls: the ranks waiting for their turn leave the CPU to the two
   being measured (emulated hosts share one machine's cores; MPI_Recv would spin). Gives up
   after WAIT_LIMIT_S. */
enum { WAIT_LIMIT_S = 600 };
static void recv_sleeping(void *data, int count, MPI_Datatype type, int tag) {
  MPI_Request req;
  int done = 0;
  MPI_Irecv(data, count, type, 0, tag, MPI_COMM_WORLD, &req);
  struct timespec nap = {0, 100000};
  double deadline = MPI_Wtime() + WAIT_LIMIT_S;
  for (MPI_Test(&req, &done, MPI_STATUS_IGNORE); !done; MPI_Test(&req, &done, MPI_STATUS_IGNORE)) {
    if (MPI_Wtime() > deadline) {
      fprintf(stderr, "mpi_pingpong: no word from rank 0 in %d s\n", WAIT_LIMIT_S);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    nanosleep(&nap, NULL);
  }
}

static void serve_peer(long bytes, char *buf) {
  int ctrl[2];
  MPI_Status st;
  for (int phase = 0; phase < 2; phase++) {
    if (phase == 0) recv_sleeping(ctrl, 2, MPI_INT, TAG_CTRL);
    else MPI_Recv(ctrl, 2, MPI_INT, 0, TAG_CTRL, MPI_COMM_WORLD, &st);
    for (int i = 0; i < ctrl[0]; i++) {
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD, &st);
      MPI_Send(buf, (int)bytes, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD);
    }
  }
  int window = ctrl[1];
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * window);
  for (int i = 0; i < window; i++) MPI_Irecv(buf, (int)bytes, MPI_BYTE, 0, TAG_STREAM, MPI_COMM_WORLD, &reqs[i]);
  MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
  char ack = 1;
  MPI_Send(&ack, 1, MPI_BYTE, 0, TAG_STREAM, MPI_COMM_WORLD);
  free(reqs);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long sizes[MAX_SIZES] = {8, 28676, 229408, 1835264};
  int nsizes = 4, max_iters = 2000;
  double seconds = 1.0;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) usage_exit(rank, "each option takes a value");
    if (!strcmp(argv[i], "--sizes")) {
      nsizes = parse_sizes(argv[++i], sizes);
      if (nsizes <= 0) usage_exit(rank, "--sizes takes byte counts (1 .. 2^30) separated by commas");
    } else if (!strcmp(argv[i], "--seconds")) {
      seconds = atof(argv[++i]);
      if (!(seconds > 0 && seconds <= 60)) usage_exit(rank, "--seconds takes a number in (0, 60]");
    } else if (!strcmp(argv[i], "--iters")) {
      max_iters = atoi(argv[++i]);
      if (max_iters < 5 || max_iters > 1000000) usage_exit(rank, "--iters takes a whole number in [5, 1000000]");
    } else {
      usage_exit(rank, "unknown option");
    }
  }
  if (size < 2) usage_exit(rank, "needs at least 2 ranks (mpirun -n N, N >= 2)");
  long largest = 1;
  for (int i = 0; i < nsizes; i++) if (sizes[i] > largest) largest = sizes[i];
  char *buf = calloc(1, (size_t)largest);
  char name[NAME_LEN] = {0}, *names = NULL;
  const char *env = getenv("DELTAFIN_HOST");
  if (env && *env) snprintf(name, NAME_LEN, "%s", env);
  else { int len; MPI_Get_processor_name(name, &len); name[NAME_LEN - 1] = 0; }
  if (rank == 0) names = calloc(size, NAME_LEN);
  MPI_Gather(name, NAME_LEN, MPI_CHAR, names, NAME_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("ranks=%d rank0_host=%s\n", size, names);
    for (int peer = 1; peer < size; peer++)
      for (int i = 0; i < nsizes; i++) measure(peer, sizes[i], buf, seconds, max_iters, names + (size_t)peer * NAME_LEN);
  } else {
    for (int i = 0; i < nsizes; i++) serve_peer(sizes[i], buf);
  }
  free(names);
  free(buf);
  MPI_Finalize();
  return 0;
}

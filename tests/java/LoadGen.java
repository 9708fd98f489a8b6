import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import com.alibaba.fastjson.JSON;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The broker benchmark's load generator (tests/benchmarks/bench_broker.py runs it against our broker
 * and against the real 4.9.8 one with the same arguments). One mode per run; prints one JSON line
 * with the result (and {"event": ...} progress lines); exit status 0 unless something failed.
 *
 *   send NS TOPIC [--threads 8] [--size 1024] [--count N | --duration-s S] [--warmup 2000] [--queues 8]
 *       Sync sends of SIZE-byte bodies from THREADS threads sharing one DefaultMQProducer: msgs/s and
 *       the send round-trip time p50/p99 (µs). The warm-up sends are not counted.
 *   batch NS TOPIC [--threads 8] [--batch 32] [--size 1024] [--count N] [--warmup 100]
 *       send(Collection) of BATCH messages per call (one MessageBatch request, code 320): msgs/s.
 *   consume NS TOPIC GROUP --count N
 *       A DefaultMQPushConsumer (CLUSTERING, CONSUME_FROM_FIRST_OFFSET, client defaults: 20 threads,
 *       pullBatchSize 32) in a new group that counts messages until N arrived: msgs/s from the first
 *       message received to the N-th (and wall time from start()).
 *   latency NS TOPIC GROUP [--count 2000] [--warmup 200] [--interval-ms 2] [--size 1024]
 *       A push consumer waits (its pulls held by the broker: long polling); one thread sends a message
 *       every INTERVAL ms with System.nanoTime() in the first 8 bytes of the body; the consumer
 *       records receive time - send start. p50/p90/p99/max in ms.
 */
public final class LoadGen {
    private static final long T0 = System.nanoTime();

    public static void main(String[] args) throws Exception {
        if (System.getProperty("rocketmq.client.rebalance.waitInterval") == null) {
            System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        }
        if (args.length < 3) {
            System.err.println("usage: LoadGen send|batch NS TOPIC [opts] | consume|latency NS TOPIC GROUP [opts]");
            System.exit(2);
        }
        String mode = args[0];
        String ns = args[1];
        String topic = args[2];
        boolean hasGroup = mode.equals("consume") || mode.equals("latency");
        String group = hasGroup ? args[3] : null;
        Map<String, String> opt = new TreeMap<>();
        for (int i = hasGroup ? 4 : 3; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        Map<String, Object> out;
        switch (mode) {
            case "send": out = send(ns, topic, opt, false); break;
            case "batch": out = send(ns, topic, opt, true); break;
            case "consume": out = consume(ns, topic, group, opt); break;
            case "latency": out = latency(ns, topic, group, opt); break;
            default:
                System.err.println("unknown mode " + mode);
                System.exit(2);
                return;
        }
        out.put("mode", mode);
        emit(out);
        System.exit(Boolean.TRUE.equals(out.get("ok")) ? 0 : 1);
    }

    private static long longOpt(Map<String, String> opt, String k, long d) {
        String v = opt.get(k);
        return v == null ? d : Long.parseLong(v);
    }

    private static DefaultMQProducer producer(String ns, Map<String, String> opt) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("LoadGenProducer");
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        p.setDefaultTopicQueueNums((int) longOpt(opt, "queues", 8));
        p.setInstanceName("loadgen-" + ProcessHandle.current().pid());
        p.start();
        return p;
    }

    // --- send / batch ----------------------------------------------------------------------------
    private static Map<String, Object> send(String ns, String topic, Map<String, String> opt, boolean batch)
            throws Exception {
        int threads = (int) longOpt(opt, "threads", 8);
        int size = (int) longOpt(opt, "size", 1024);
        int batchSize = batch ? (int) longOpt(opt, "batch", 32) : 1;
        long count = longOpt(opt, "count", 0);
        long durationMs = 1000 * longOpt(opt, "duration-s", count > 0 ? 0 : 10);
        long warmup = longOpt(opt, "warmup", batch ? 100 : 2000);   // in calls
        byte[] body = new byte[size];
        new Random(42).nextBytes(body);
        DefaultMQProducer p = producer(ns, opt);

        AtomicLong calls = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        String[] firstError = {null};
        // warm-up: JIT, routes, connections (the topic is auto-created by the first send)
        for (long i = 0; i < warmup; i++) {
            callOnce(p, topic, body, batchSize, errors, firstError);
        }
        long warmupMsgs = (warmup - errors.get()) * batchSize;
        emit(event("warmed-up", "calls", warmup, "errors", errors.get()));
        errors.set(0);

        long callLimit = count > 0 ? (count + batchSize - 1) / batchSize : Long.MAX_VALUE;
        List<long[]> rts = new ArrayList<>();
        Thread[] ts = new Thread[threads];
        CountDownLatch go = new CountDownLatch(1);
        long[] deadline = {Long.MAX_VALUE};
        for (int t = 0; t < threads; t++) {
            long[] rt = new long[(int) Math.min(callLimit, 2_000_000L) / threads + 16];
            rts.add(rt);
            ts[t] = new Thread(() -> {
                int n = 0;
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                while (calls.incrementAndGet() <= callLimit && System.nanoTime() < deadline[0]) {
                    long s = System.nanoTime();
                    callOnce(p, topic, body, batchSize, errors, firstError);
                    if (n < rt.length) {
                        rt[n++] = (System.nanoTime() - s) / 1000;
                    }
                }
                rt[rt.length - 1] = n;   // the count, in the last slot
            }, "sender-" + t);
            ts[t].start();
        }
        long start = System.nanoTime();
        if (durationMs > 0) {
            deadline[0] = start + durationMs * 1_000_000L;
        }
        go.countDown();
        for (Thread t : ts) {
            t.join();
        }
        double secs = (System.nanoTime() - start) / 1e9;
        p.shutdown();
        long done = Math.min(calls.get(), callLimit);
        if (durationMs > 0) {
            done = calls.get() - threads;   // each thread's last increment did not send
        }
        long[] all = merge(rts);
        long msgs = (done - errors.get()) * batchSize;
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("threads", threads);
        r.put("size", size);
        r.put("batch", batchSize);
        r.put("msgs", msgs);
        r.put("calls", done);
        r.put("warmup_msgs", warmupMsgs);
        r.put("errors", errors.get());
        r.put("first_error", firstError[0]);
        r.put("seconds", round(secs));
        r.put("msgs_per_s", round(msgs / secs));
        r.put("mib_per_s", round(msgs * (double) size / secs / (1 << 20)));
        r.put("rt_us_p50", pct(all, 50));
        r.put("rt_us_p99", pct(all, 99));
        r.put("ok", errors.get() == 0);
        return r;
    }

    private static void callOnce(DefaultMQProducer p, String topic, byte[] body, int batchSize, AtomicLong errors,
                                 String[] firstError) {
        try {
            SendResult r;
            if (batchSize == 1) {
                r = p.send(new Message(topic, "TagL", body));
            } else {
                List<Message> ms = new ArrayList<>(batchSize);
                for (int i = 0; i < batchSize; i++) {
                    ms.add(new Message(topic, "TagL", body));
                }
                r = p.send(ms);
            }
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                errors.incrementAndGet();
                synchronized (firstError) {
                    if (firstError[0] == null) {
                        firstError[0] = r.getSendStatus().toString();
                    }
                }
            }
        } catch (Exception e) {
            errors.incrementAndGet();
            synchronized (firstError) {
                if (firstError[0] == null) {
                    firstError[0] = e.toString();
                }
            }
        }
    }

    private static long[] merge(List<long[]> rts) {
        int total = 0;
        for (long[] rt : rts) {
            total += (int) rt[rt.length - 1];
        }
        long[] all = new long[total];
        int i = 0;
        for (long[] rt : rts) {
            int n = (int) rt[rt.length - 1];
            System.arraycopy(rt, 0, all, i, n);
            i += n;
        }
        Arrays.sort(all);
        return all;
    }

    // --- consume ---------------------------------------------------------------------------------
    private static Map<String, Object> consume(String ns, String topic, String group, Map<String, String> opt)
            throws Exception {
        long count = longOpt(opt, "count", 100_000);
        long timeoutMs = 1000 * longOpt(opt, "timeout-s", 600);
        AtomicLong got = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        long[] first = {0};
        long[] last = {0};
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName("loadgen-consume");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long n = got.addAndGet(msgs.size());
            for (MessageExt m : msgs) {
                bytes.addAndGet(m.getBody().length);
            }
            if (n == msgs.size()) {
                synchronized (first) {
                    if (first[0] == 0) {
                        first[0] = System.nanoTime();
                    }
                }
            }
            if (n >= count && last[0] == 0) {
                last[0] = System.nanoTime();
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long start = System.nanoTime();
        c.start();
        long lastReport = System.nanoTime();
        while (!done.await(1, TimeUnit.SECONDS)) {
            if ((System.nanoTime() - start) / 1_000_000 > timeoutMs) {
                break;
            }
            if (System.nanoTime() - lastReport > 10_000_000_000L) {
                lastReport = System.nanoTime();
                emit(event("progress", "consumed", got.get()));
            }
        }
        long end = last[0] != 0 ? last[0] : System.nanoTime();
        c.shutdown();
        Map<String, Object> r = new LinkedHashMap<>();
        long n = got.get();
        double secs = first[0] == 0 ? 0 : (end - first[0]) / 1e9;
        r.put("msgs", n);
        r.put("expected", count);
        r.put("seconds", round(secs));
        r.put("wall_seconds", round((end - start) / 1e9));
        r.put("msgs_per_s", secs > 0 ? round(n / secs) : 0);
        r.put("mib_per_s", secs > 0 ? round(bytes.get() / secs / (1 << 20)) : 0);
        r.put("ok", n >= count);
        return r;
    }

    // --- latency ---------------------------------------------------------------------------------
    private static Map<String, Object> latency(String ns, String topic, String group, Map<String, String> opt)
            throws Exception {
        int count = (int) longOpt(opt, "count", 2000);
        int warmup = (int) longOpt(opt, "warmup", 200);
        long intervalMs = longOpt(opt, "interval-ms", 2);
        int size = Math.max(16, (int) longOpt(opt, "size", 1024));
        long timeoutMs = 1000 * longOpt(opt, "timeout-s", 120);
        long[] lat = new long[count + warmup];
        AtomicLong got = new AtomicLong();
        DefaultMQProducer p = producer(ns, opt);
        // create the topic (auto-create) before the consumer subscribes, so its rebalance sees the queues
        byte[] body = new byte[size];
        p.send(new Message(topic, "TagW", body));
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName("loadgen-latency");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.setPollNameServerInterval(1000);
        c.subscribe(topic, "TagL");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            for (MessageExt m : msgs) {
                ByteBuffer b = ByteBuffer.wrap(m.getBody());
                int seq = b.getInt(8);
                if (seq >= 0 && seq < lat.length) {
                    lat[seq] = now - b.getLong(0);
                }
                if (got.incrementAndGet() >= lat.length) {
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        // wait for the rebalance to assign every queue and the first pulls to be held by the broker
        int queues = p.fetchPublishMessageQueues(topic).size();
        long w0 = System.currentTimeMillis();
        while (countQueues(c, topic) < queues && System.currentTimeMillis() - w0 < 30_000) {
            Thread.sleep(50);
        }
        Thread.sleep(1000);
        emit(event("consumer-ready", "queues", countQueues(c, topic), "wait_ms", System.currentTimeMillis() - w0));
        long errors = 0;
        for (int i = 0; i < lat.length; i++) {
            ByteBuffer b = ByteBuffer.allocate(size);
            b.putLong(0, System.nanoTime());
            b.putInt(8, i);
            try {
                SendResult r = p.send(new Message(topic, "TagL", b.array()));
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    errors++;
                }
            } catch (Exception e) {
                errors++;
            }
            if (intervalMs > 0) {
                Thread.sleep(intervalMs);
            }
        }
        boolean all = done.await(timeoutMs, TimeUnit.MILLISECONDS);
        c.shutdown();
        p.shutdown();
        long[] measured = new long[count];
        int n = 0;
        for (int i = warmup; i < lat.length; i++) {
            if (lat[i] > 0) {
                measured[n++] = lat[i];
            }
        }
        long[] m = Arrays.copyOf(measured, n);
        Arrays.sort(m);
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("msgs", n);
        r.put("expected", count);
        r.put("errors", errors);
        r.put("p50_ms", n > 0 ? round(pct(m, 50) / 1e6) : null);
        r.put("p90_ms", n > 0 ? round(pct(m, 90) / 1e6) : null);
        r.put("p99_ms", n > 0 ? round(pct(m, 99) / 1e6) : null);
        r.put("max_ms", n > 0 ? round(m[n - 1] / 1e6) : null);
        r.put("ok", all && n == count && errors == 0);
        return r;
    }

    private static int countQueues(DefaultMQPushConsumer c, String topic) {
        int n = 0;
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                n++;
            }
        }
        return n;
    }

    // --- output ----------------------------------------------------------------------------------
    private static long pct(long[] sorted, int p) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    private static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }

    private static Map<String, Object> event(String name, Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", name);
        m.put("t_ms", (System.nanoTime() - T0) / 1_000_000);
        for (int i = 0; i + 1 < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    private static synchronized void emit(Map<String, Object> m) {
        System.out.println(JSON.toJSONString(m));
        System.out.flush();
    }
}

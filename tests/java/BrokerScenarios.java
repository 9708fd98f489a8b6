import java.nio.charset.StandardCharsets;
import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Date;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/**
 * Java-client scenarios against a RocketMQ broker (ours or the real 4.9.8 one), driven by
 * tests/broker/test_java_scenarios.py. One mode per run:
 *
 *   push-retry-dlq NS TOPIC GROUP [--count 20] [--max-reconsume 2] [--delay-level 1] [--min-gap-ms 800]
 *       DefaultMQPushConsumer (CLUSTERING, concurrently). One "poison" message is answered
 *       RECONSUME_LATER every time (context.setDelayLevelWhenNextConsume(delay-level), so the
 *       broker's CONSUMER_SEND_MSG_BACK puts it through SCHEDULE_TOPIC_XXXX to %RETRY%GROUP);
 *       asserts it is delivered with reconsumeTimes 0..max, at least min-gap-ms apart, then lands
 *       in %DLQ%GROUP (read with DefaultMQPullConsumer) and is not delivered again; every other
 *       message is consumed exactly once.
 *   orderly NS TOPIC GROUP [--keys 8] [--per-key 20] [--backlog 0] [--work-ms 2]
 *       Two DefaultMQPushConsumer with MessageListenerOrderly in one group (instance names c1, c2).
 *       With --backlog B, B messages per key are sent first and c2 joins while c1 is consuming them
 *       (c1 must hand over half of its queues through the broker's locks). Waits until each holds
 *       half of the 4 queues locked, sends phase 1 (MessageQueueSelector by key), checks per-key
 *       order, that no queue is inside two consumers' listeners at the same time and that no queue is
 *       locked by both (sampled every 20 ms); shuts c1 down, sends phase 2, and asserts c2 takes over
 *       c1's queues and finishes.
 *   broadcast NS TOPIC GROUP [--count 40]
 *       Two BROADCASTING push consumers in one group; each must receive every message once.
 *   timestamp NS TOPIC GROUP [--count 10]
 *       Sends batch A, waits, sends batch B after a whole-second timestamp T; searchOffset(mq, T)
 *       (SEARCH_OFFSET_BY_TIMESTAMP) must give each queue's first B offset, and a pull there finds B.
 *       Then a push consumer of a new group with CONSUME_FROM_TIMESTAMP T must get all of B; how
 *       many A messages it also got is reported (push_received_before_timestamp; 4.9.8: all of them).
 *   delay NS TOPIC GROUP [--levels 1,2,3] [--expect-ms 1000,2000,3000]
 *       Producer-side delayed messages (setDelayTimeLevel) to a waiting push consumer: each arrives
 *       no earlier than its level's delay (minus 150 ms) and no later than 6 s after it.
 *
 *   seed NS TOPIC GROUP [--count 40]
 *       Sends COUNT messages (keys SEED-i, tags TagA/TagB alternating), consumes them all with a push
 *       consumer of GROUP and shuts it down (offsets committed); prints the msgIds by key - the data
 *       the mqadmin tests look at.
 *
 *   acl NS TOPIC GROUP [--ak RocketMQ] [--sk 12345678] [--expect ok|denied]
 *       A producer with AclClientRPCHook(ak, sk) sends one message; if accepted, a pull consumer with
 *       the same credentials pulls the topic. Reports the send status or the broker's response code
 *       and remark; fails when the outcome is not --expect.
 *
 * Every line on stdout is one JSON object: {"event": ...} progress lines, and a final
 * {"mode": ..., "result": "PASS"|"FAIL", "failures": [...], ...}. Exit status 0 = PASS,
 * 1 = FAIL, 2 = usage/unexpected error. Common option: --timeout-s 60.
 */
public final class BrokerScenarios {
    private static final long T0 = System.currentTimeMillis();
    private static final String NONCE = Long.toString(System.nanoTime() % 1_000_000_000L, 36);

    private final String mode;
    private final String ns;
    private final String topic;
    private final String group;
    private final Map<String, String> opt;
    private final long timeoutMs;
    private final List<String> failures = new CopyOnWriteArrayList<>();
    private final Map<String, Object> result = new LinkedHashMap<>();

    private BrokerScenarios(String mode, String ns, String topic, String group, Map<String, String> opt) {
        this.mode = mode;
        this.ns = ns;
        this.topic = topic;
        this.group = group;
        this.opt = opt;
        this.timeoutMs = 1000L * intOpt("timeout-s", 60);
    }

    public static void main(String[] args) {
        // Rebalance every 2 s instead of 20 s (RebalanceService.waitInterval is read once, when the
        // class loads, so this must happen before any client object exists).
        if (System.getProperty("rocketmq.client.rebalance.waitInterval") == null) {
            System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        }
        if (args.length < 4) {
            System.err.println("usage: BrokerScenarios MODE NAMESRV TOPIC GROUP [--opt value ...]");
            System.exit(2);
        }
        Map<String, String> opt = new TreeMap<>();
        for (int i = 4; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        BrokerScenarios s = new BrokerScenarios(args[0], args[1], args[2], args[3], opt);
        int code;
        try {
            code = s.run();
        } catch (Throwable t) {
            t.printStackTrace();
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("mode", args[0]);
            m.put("result", "ERROR");
            m.put("error", t.toString());
            emit(m);
            code = 2;
        }
        System.out.flush();
        System.exit(code);
    }

    private int run() throws Exception {
        result.put("mode", mode);
        result.put("topic", topic);
        result.put("group", group);
        switch (mode) {
            case "push-retry-dlq": pushRetryDlq(); break;
            case "orderly": orderly(); break;
            case "broadcast": broadcast(); break;
            case "timestamp": timestamp(); break;
            case "delay": delay(); break;
            case "seed": seed(); break;
            case "acl": acl(); break;
            default:
                System.err.println("unknown mode " + mode);
                return 2;
        }
        result.put("elapsed_ms", System.currentTimeMillis() - T0);
        result.put("result", failures.isEmpty() ? "PASS" : "FAIL");
        result.put("failures", failures);
        emit(result);
        return failures.isEmpty() ? 0 : 1;
    }

    // --- push-retry-dlq --------------------------------------------------------------------------
    private static final class Delivery {
        final int reconsumeTimes;
        final long atMs;
        final String retryTopic;
        final String msgId;
        final int queueId;

        Delivery(MessageExt m) {
            reconsumeTimes = m.getReconsumeTimes();
            atMs = System.currentTimeMillis();
            retryTopic = m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC);
            msgId = m.getMsgId();
            queueId = m.getQueueId();
        }
    }

    private void pushRetryDlq() throws Exception {
        int count = intOpt("count", 20);
        int maxReconsume = intOpt("max-reconsume", 2);
        int delayLevel = intOpt("delay-level", 1);
        long minGap = intOpt("min-gap-ms", 800);
        String poisonKey = "POISON-" + NONCE;
        String poisonBody = "poison body " + NONCE;

        Map<String, AtomicInteger> normal = new ConcurrentHashMap<>();
        List<Delivery> poison = new CopyOnWriteArrayList<>();
        DefaultMQProducer producer = producer();
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String key = "K-" + NONCE + "-" + i;
            keys.add(key);
            send(producer, new Message(topic, "TagA", key, ("body " + i).getBytes(StandardCharsets.UTF_8)));
            if (i == count / 2) {
                send(producer, new Message(topic, "TagA", poisonKey, poisonBody.getBytes(StandardCharsets.UTF_8)));
            }
        }
        event("sent", "count", count + 1);

        DefaultMQPushConsumer consumer = pushConsumer(group, "c1", MessageModel.CLUSTERING);
        consumer.setMaxReconsumeTimes(maxReconsume);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (poisonKey.equals(m.getKeys())) {
                    Delivery d = new Delivery(m);
                    poison.add(d);
                    event("poison-delivered", "reconsumeTimes", d.reconsumeTimes, "retryTopic", d.retryTopic,
                          "queueId", d.queueId, "msgId", d.msgId);
                    ctx.setDelayLevelWhenNextConsume(delayLevel);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                normal.computeIfAbsent(m.getKeys(), k -> new AtomicInteger()).incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long t1 = System.currentTimeMillis();
        boolean done = waitFor(() -> normal.size() >= count && poison.size() >= maxReconsume + 1);
        result.put("consume_ms", System.currentTimeMillis() - t1);
        if (!done) {
            failures.add("timed out: " + normal.size() + "/" + count + " normal keys, " + poison.size() + "/"
                         + (maxReconsume + 1) + " poison deliveries");
        }

        // The DLQ: the broker creates %DLQ%GROUP (1 queue) when reconsumeTimes >= maxReconsumeTimes.
        String dlq = "%DLQ%" + group;
        DefaultMQPullConsumer reader = new DefaultMQPullConsumer(group + "_DLQREADER_" + NONCE);
        reader.setNamesrvAddr(ns);
        reader.setInstanceName("dlqreader");
        reader.start();
        List<MessageExt> dlqMsgs = new ArrayList<>();
        String[] lastError = {null};
        long t2 = System.currentTimeMillis();
        // a short look only when the deliveries already timed out, so the run ends within its budget
        waitFor(done ? timeoutMs : 5000, () -> {
            try {
                dlqMsgs.clear();
                for (MessageQueue mq : reader.fetchSubscribeMessageQueues(dlq)) {
                    long off = reader.minOffset(mq);
                    while (true) {
                        PullResult pr = reader.pull(mq, "*", off, 32, 5000);
                        if (pr.getPullStatus() != PullStatus.FOUND) {
                            break;
                        }
                        dlqMsgs.addAll(pr.getMsgFoundList());
                        off = pr.getNextBeginOffset();
                    }
                }
                return !dlqMsgs.isEmpty();
            } catch (Exception e) {
                lastError[0] = e.toString();
                return false;
            }
        });
        result.put("dlq_wait_ms", System.currentTimeMillis() - t2);
        // No further deliveries once it is in the DLQ: wait a few retry delays.
        Thread.sleep(Math.max(3000, 3 * minGap));
        consumer.shutdown();
        reader.shutdown();
        producer.shutdown();

        List<Integer> times = new ArrayList<>();
        List<Long> gaps = new ArrayList<>();
        for (int i = 0; i < poison.size(); i++) {
            times.add(poison.get(i).reconsumeTimes);
            if (i > 0) {
                gaps.add(poison.get(i).atMs - poison.get(i - 1).atMs);
            }
        }
        result.put("poison_reconsume_times", times);
        result.put("poison_gaps_ms", gaps);
        List<Integer> expect = new ArrayList<>();
        for (int i = 0; i <= maxReconsume; i++) {
            expect.add(i);
        }
        if (!times.equals(expect)) {
            failures.add("poison delivered with reconsumeTimes " + times + ", expected " + expect);
        }
        for (int i = 1; i < poison.size(); i++) {
            Delivery d = poison.get(i);
            if (!topic.equals(d.retryTopic)) {
                failures.add("redelivery " + i + " has RETRY_TOPIC=" + d.retryTopic + ", expected " + topic);
            }
        }
        for (long g : gaps) {
            if (g < minGap) {
                failures.add("redelivery after " + g + " ms < " + minGap + " ms (delay level " + delayLevel + ")");
            }
        }
        int dups = 0;
        for (String k : keys) {
            AtomicInteger n = normal.get(k);
            if (n == null) {
                failures.add("normal message " + k + " never consumed");
            } else if (n.get() > 1) {
                dups++;
            }
        }
        result.put("normal_consumed", normal.size());
        result.put("normal_duplicates", dups);
        if (dups > 0) {
            failures.add(dups + " normal messages consumed more than once");
        }
        List<Map<String, Object>> dlqOut = new ArrayList<>();
        for (MessageExt m : dlqMsgs) {
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("topic", m.getTopic());
            d.put("queueId", m.getQueueId());
            d.put("queueOffset", m.getQueueOffset());
            d.put("keys", m.getKeys());
            d.put("reconsumeTimes", m.getReconsumeTimes());
            d.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
            d.put("properties", new TreeMap<>(m.getProperties()));
            dlqOut.add(d);
        }
        result.put("dlq", dlqOut);
        if (dlqMsgs.size() != 1) {
            failures.add(dlq + " holds " + dlqMsgs.size() + " messages, expected 1"
                         + (lastError[0] != null ? " (last error: " + lastError[0] + ")" : ""));
        } else {
            MessageExt m = dlqMsgs.get(0);
            if (!poisonKey.equals(m.getKeys()) || !poisonBody.equals(new String(m.getBody(), StandardCharsets.UTF_8))) {
                failures.add("DLQ message is not the poison message: keys=" + m.getKeys());
            }
            if (!dlq.equals(m.getTopic())) {
                failures.add("DLQ message topic " + m.getTopic());
            }
            if (m.getReconsumeTimes() != maxReconsume + 1) {
                failures.add("DLQ message reconsumeTimes " + m.getReconsumeTimes() + ", expected " + (maxReconsume + 1));
            }
        }
    }

    // --- orderly ---------------------------------------------------------------------------------
    private void orderly() throws Exception {
        int nkeys = intOpt("keys", 8);
        int perKey = intOpt("per-key", 20);
        int backlog = intOpt("backlog", 0);
        long workMs = intOpt("work-ms", 2);
        DefaultMQProducer producer = producer();
        int queues = ensureTopic(producer);
        result.put("queues", queues);

        Map<Integer, String> active = new ConcurrentHashMap<>();          // queueId -> consumer inside listener
        Map<String, Integer> expected = new ConcurrentHashMap<>();        // key -> next seq
        Map<Integer, List<String>> owners = new ConcurrentHashMap<>();    // queueId -> consumer per delivery
        Map<String, AtomicInteger> consumedBy = new ConcurrentHashMap<>();
        AtomicInteger overlaps = new AtomicInteger();
        AtomicInteger gaps = new AtomicInteger();
        AtomicInteger dups = new AtomicInteger();
        AtomicInteger total = new AtomicInteger();

        DefaultMQPushConsumer[] cs = new DefaultMQPushConsumer[2];
        for (int c = 0; c < 2; c++) {
            String me = "c" + (c + 1);
            consumedBy.put(me, new AtomicInteger());
            DefaultMQPushConsumer consumer = pushConsumer(group, me, MessageModel.CLUSTERING);
            consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                int qid = ctx.getMessageQueue().getQueueId();
                String other = active.putIfAbsent(qid, me);
                if (other != null) {
                    overlaps.incrementAndGet();
                    event("overlap", "queueId", qid, "consumer", me, "other", other);
                }
                try {
                    for (MessageExt m : msgs) {
                        owners.computeIfAbsent(qid, q -> Collections.synchronizedList(new ArrayList<>())).add(me);
                        if (m.getKeys() == null || !m.getKeys().startsWith("ORDER-")) {
                            continue;   // the topic-creating warm-up message
                        }
                        String[] parts = new String(m.getBody(), StandardCharsets.UTF_8).split(":");
                        String key = parts[0];
                        int seq = Integer.parseInt(parts[1]);
                        int want = expected.getOrDefault(key, 0);
                        if (seq == want) {
                            expected.put(key, want + 1);
                            total.incrementAndGet();
                        } else if (seq < want) {
                            dups.incrementAndGet();
                            event("duplicate", "key", key, "seq", seq, "expected", want, "consumer", me);
                        } else {
                            gaps.incrementAndGet();
                            event("out-of-order", "key", key, "seq", seq, "expected", want, "consumer", me);
                        }
                        consumedBy.get(me).incrementAndGet();
                    }
                    if (workMs > 0) {
                        Thread.sleep(workMs);
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } finally {
                    active.remove(qid, me);
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
            cs[c] = consumer;
        }
        // Lock sampler: a queue both consumers hold (locked, not dropped) at the same instant.
        AtomicInteger lockConflicts = new AtomicInteger();
        Set<Integer> conflictQueues = ConcurrentHashMap.newKeySet();
        boolean[] c1Running = {true};
        Thread sampler = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                if (c1Running[0]) {
                    Set<Integer> both = lockedQueues(cs[0]);
                    both.retainAll(lockedQueues(cs[1]));
                    if (!both.isEmpty()) {
                        lockConflicts.incrementAndGet();
                        conflictQueues.addAll(both);
                    }
                }
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "lock-sampler");
        sampler.setDaemon(true);
        sampler.start();

        int sent = 0;
        long t0 = System.currentTimeMillis();
        if (backlog > 0) {
            // A backlog that c1 is still working through when c2 joins: c1 must give up half of
            // its queues (RebalanceLockManager + the client's unlockDelay) before c2 may lock them.
            sendOrdered(producer, nkeys, 0, backlog);
            sent = backlog;
            cs[0].start();
            waitFor(() -> consumedBy.get("c1").get() >= nkeys);
            cs[1].start();
        } else {
            cs[0].start();
            cs[1].start();
        }
        long t1 = System.currentTimeMillis();
        int half = queues / 2;
        boolean split = waitFor(() -> lockedQueues(cs[0]).size() == half && lockedQueues(cs[1]).size() == queues - half);
        result.put("split_ms", System.currentTimeMillis() - t1);
        Set<Integer> c1Queues = lockedQueues(cs[0]);
        result.put("c1_queues", new ArrayList<>(c1Queues));
        result.put("c2_queues", new ArrayList<>(lockedQueues(cs[1])));
        if (!split) {
            failures.add("queues not split between c1 and c2: c1=" + c1Queues + " c2=" + lockedQueues(cs[1]));
        }

        result.put("c1_before_split", consumedBy.get("c1").get());
        int base = sent;
        sendOrdered(producer, nkeys, base, perKey);
        boolean phase1 = waitFor(() -> total.get() >= nkeys * (base + perKey));
        result.put("phase1_by_consumer", snapshot(consumedBy));
        if (!phase1) {
            failures.add("phase 1: consumed " + total.get() + "/" + nkeys * (base + perKey));
        }
        if (split && (consumedBy.get("c1").get() == 0 || consumedBy.get("c2").get() == 0)) {
            failures.add("phase 1 not consumed by both: " + snapshot(consumedBy));
        }

        long t2 = System.currentTimeMillis();
        c1Running[0] = false;
        cs[0].shutdown();
        result.put("c1_shutdown_ms", System.currentTimeMillis() - t2);
        Map<String, Integer> before = snapshot(consumedBy);
        sendOrdered(producer, nkeys, base + perKey, perKey);
        int all = base + 2 * perKey;
        boolean phase2 = waitFor(() -> total.get() >= nkeys * all);
        result.put("takeover_ms", System.currentTimeMillis() - t2);
        result.put("c2_queues_after", new ArrayList<>(lockedQueues(cs[1])));
        if (!phase2) {
            failures.add("phase 2: consumed " + total.get() + "/" + nkeys * all);
        }
        if (consumedBy.get("c1").get() != before.get("c1")) {
            failures.add("c1 consumed after its shutdown");
        }
        // Took over: c2 consumed phase-2 messages from every queue c1 held.
        for (int q : c1Queues) {
            List<String> o = owners.getOrDefault(q, Collections.emptyList());
            if (o.isEmpty() || !"c2".equals(o.get(o.size() - 1))) {
                failures.add("queue " + q + " (c1's) not taken over by c2: " + summarize(o));
            }
        }
        sampler.interrupt();
        cs[1].shutdown();
        producer.shutdown();
        result.put("total_ms", System.currentTimeMillis() - t0);
        result.put("lock_conflicts", lockConflicts.get());
        if (lockConflicts.get() > 0) {
            failures.add("queues " + conflictQueues + " were locked by both consumers at once (" + lockConflicts.get()
                         + " samples)");
        }

        Map<String, Object> windows = new TreeMap<>();
        for (Map.Entry<Integer, List<String>> e : owners.entrySet()) {
            windows.put(Integer.toString(e.getKey()), summarize(e.getValue()));
        }
        result.put("ownership_windows", windows);
        result.put("consumed_by", snapshot(consumedBy));
        result.put("overlaps", overlaps.get());
        result.put("out_of_order", gaps.get());
        result.put("duplicates", dups.get());
        if (overlaps.get() > 0) {
            failures.add(overlaps.get() + " times a queue was inside both consumers' listeners at once");
        }
        if (gaps.get() > 0) {
            failures.add(gaps.get() + " messages out of order (a later seq before an earlier one)");
        }
        for (int k = 0; k < nkeys; k++) {
            int got = expected.getOrDefault("ORDER-" + k, 0);
            if (got != all) {
                failures.add("key ORDER-" + k + ": consumed in order up to " + got + ", expected " + all);
            }
        }
    }

    private void sendOrdered(DefaultMQProducer producer, int nkeys, int from, int n) throws Exception {
        for (int s = from; s < from + n; s++) {
            for (int k = 0; k < nkeys; k++) {
                Message m = new Message(topic, "TagO", "ORDER-" + k, ("ORDER-" + k + ":" + s).getBytes(StandardCharsets.UTF_8));
                SendResult r = producer.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), k, 15000);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    failures.add("send status " + r.getSendStatus());
                }
            }
        }
        event("sent-ordered", "from", from, "count", n * nkeys);
    }

    private Set<Integer> lockedQueues(DefaultMQPushConsumer c) {
        Set<Integer> out = new HashSet<>();
        for (Map.Entry<MessageQueue, ProcessQueue> e
                : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
            if (e.getKey().getTopic().equals(topic) && !e.getValue().isDropped() && e.getValue().isLocked()) {
                out.add(e.getKey().getQueueId());
            }
        }
        return out;
    }

    /** ["c1 x12", "c2 x30"]: the runs of one owner, in delivery order. */
    private static List<String> summarize(List<String> owners) {
        List<String> runs = new ArrayList<>();
        String cur = null;
        int n = 0;
        synchronized (owners) {
            for (String o : owners) {
                if (o.equals(cur)) {
                    n++;
                } else {
                    if (cur != null) {
                        runs.add(cur + " x" + n);
                    }
                    cur = o;
                    n = 1;
                }
            }
        }
        if (cur != null) {
            runs.add(cur + " x" + n);
        }
        return runs;
    }

    // --- broadcast -------------------------------------------------------------------------------
    private void broadcast() throws Exception {
        int count = intOpt("count", 40);
        DefaultMQProducer producer = producer();
        int queues = ensureTopic(producer);
        List<Map<String, AtomicInteger>> got = new ArrayList<>();
        DefaultMQPushConsumer[] cs = new DefaultMQPushConsumer[2];
        for (int c = 0; c < 2; c++) {
            Map<String, AtomicInteger> mine = new ConcurrentHashMap<>();
            got.add(mine);
            DefaultMQPushConsumer consumer = pushConsumer(group, "b" + (c + 1), MessageModel.BROADCASTING);
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (m.getKeys() != null && m.getKeys().startsWith("B-")) {
                        mine.computeIfAbsent(m.getKeys(), k -> new AtomicInteger()).incrementAndGet();
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            cs[c] = consumer;
        }
        boolean ready = waitFor(() -> allQueues(cs[0]).size() == queues && allQueues(cs[1]).size() == queues);
        if (!ready) {
            failures.add("broadcast consumers do not each hold every queue: " + allQueues(cs[0]) + " " + allQueues(cs[1]));
        }
        for (int i = 0; i < count; i++) {
            send(producer, new Message(topic, "TagB", "B-" + NONCE + "-" + i, ("b" + i).getBytes(StandardCharsets.UTF_8)));
        }
        long t1 = System.currentTimeMillis();
        boolean done = waitFor(() -> got.get(0).size() >= count && got.get(1).size() >= count);
        result.put("consume_ms", System.currentTimeMillis() - t1);
        Thread.sleep(1000);   // let duplicates show up, if any
        for (DefaultMQPushConsumer c : cs) {
            c.shutdown();
        }
        producer.shutdown();
        for (int c = 0; c < 2; c++) {
            int dups = 0;
            for (AtomicInteger n : got.get(c).values()) {
                dups += n.get() > 1 ? 1 : 0;
            }
            result.put("b" + (c + 1) + "_received", got.get(c).size());
            result.put("b" + (c + 1) + "_duplicates", dups);
            if (got.get(c).size() != count) {
                failures.add("b" + (c + 1) + " received " + got.get(c).size() + "/" + count);
            }
            if (dups > 0) {
                failures.add("b" + (c + 1) + " received " + dups + " messages more than once");
            }
        }
        if (!done) {
            failures.add("timed out");
        }
    }

    private Set<Integer> allQueues(DefaultMQPushConsumer c) {
        Set<Integer> out = new HashSet<>();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                out.add(mq.getQueueId());
            }
        }
        return out;
    }

    // --- timestamp -------------------------------------------------------------------------------
    private void timestamp() throws Exception {
        int count = intOpt("count", 10);
        DefaultMQProducer producer = producer();
        long lastA = 0;
        for (int i = 0; i < count; i++) {
            lastA = send(producer, new Message(topic, "TagT", "A-" + i, ("a" + i).getBytes(StandardCharsets.UTF_8)));
        }
        // T: a whole second at least 1.5 s after the last A message was sent (consumeTimestamp has
        // second precision; the broker's search by time picks the offset whose store time is
        // closest to T, so B must be much closer to T than A).
        long t = ((lastA + 1500) / 1000 + 1) * 1000;
        while (System.currentTimeMillis() < t) {
            Thread.sleep(Math.max(1, t - System.currentTimeMillis()));
        }
        Map<Integer, Long> firstB = new TreeMap<>();   // queueId -> queue offset of its first B message
        for (int i = 0; i < count; i++) {
            SendResult r = producer.send(new Message(topic, "TagT", "B-" + i, ("b" + i).getBytes(StandardCharsets.UTF_8)));
            firstB.putIfAbsent(r.getMessageQueue().getQueueId(), r.getQueueOffset());
        }
        String ts = new SimpleDateFormat("yyyyMMddHHmmss").format(new Date(t));
        result.put("consume_timestamp", ts);

        // SEARCH_OFFSET_BY_TIMESTAMP on every queue that got B messages.
        DefaultMQPullConsumer puller = new DefaultMQPullConsumer(group + "_PULL");
        puller.setNamesrvAddr(ns);
        puller.setInstanceName("tpull");
        puller.start();
        Map<String, Object> found = new TreeMap<>();
        for (MessageQueue mq : puller.fetchSubscribeMessageQueues(topic)) {
            Long want = firstB.get(mq.getQueueId());
            if (want == null) {
                continue;
            }
            long off = puller.searchOffset(mq, t);
            found.put(Integer.toString(mq.getQueueId()), off);
            if (off != want) {
                failures.add("searchOffset(queue " + mq.getQueueId() + ", T) = " + off + ", expected " + want
                             + " (the first message stored after T)");
            }
            PullResult pr = puller.pull(mq, "*", off, 1, 5000);
            if (pr.getPullStatus() != PullStatus.FOUND || !pr.getMsgFoundList().get(0).getKeys().startsWith("B-")) {
                failures.add("pull at the searched offset of queue " + mq.getQueueId() + ": " + pr.getPullStatus());
            }
        }
        puller.shutdown();
        result.put("first_b_offsets", firstB);
        result.put("searched_offsets", found);

        // A push consumer of a new group with CONSUME_FROM_TIMESTAMP. 4.9.8's broker answers
        // QUERY_CONSUMER_OFFSET for an unknown group with 0 when the queue's first message is still
        // in memory (ConsumerManageProcessor.queryConsumerOffset), and the client then starts at 0
        // without searching by time: such a consumer gets A too. Reported, not judged here.
        Map<String, AtomicInteger> got = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = pushConsumer(group, "t1", MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP);
        consumer.setConsumeTimestamp(ts);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.computeIfAbsent(m.getKeys(), k -> new AtomicInteger()).incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean done = waitFor(() -> got.keySet().stream().filter(k -> k.startsWith("B-")).count() >= count);
        Thread.sleep(1000);
        consumer.shutdown();
        producer.shutdown();
        List<String> keys = new ArrayList<>(got.keySet());
        Collections.sort(keys);
        result.put("push_received", keys.size());
        result.put("push_received_before_timestamp", keys.stream().filter(k -> k.startsWith("A-")).count());
        if (!done) {
            failures.add("push consumer: not every B message received: " + keys);
        }
    }

    // --- delay -----------------------------------------------------------------------------------
    private void delay() throws Exception {
        String[] levels = opt.getOrDefault("levels", "1,2,3").split(",");
        String[] expectMs = opt.getOrDefault("expect-ms", "1000,2000,3000").split(",");
        DefaultMQProducer producer = producer();
        int queues = ensureTopic(producer);
        Map<String, Long> arrived = new ConcurrentHashMap<>();
        Map<String, Map<String, String>> props = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = pushConsumer(group, "d1", MessageModel.CLUSTERING);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (m.getKeys() != null && m.getKeys().startsWith("D-")) {
                    arrived.putIfAbsent(m.getKeys(), System.currentTimeMillis());
                    props.putIfAbsent(m.getKeys(), new TreeMap<>(m.getProperties()));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        waitFor(() -> allQueues(consumer).size() == queues);
        Map<String, Long> sentAt = new LinkedHashMap<>();
        for (String level : levels) {
            Message m = new Message(topic, "TagD", "D-" + level, ("d" + level).getBytes(StandardCharsets.UTF_8));
            m.setDelayTimeLevel(Integer.parseInt(level));
            sentAt.put("D-" + level, System.currentTimeMillis());
            send(producer, m);
        }
        boolean done = waitFor(() -> arrived.size() >= levels.length);
        consumer.shutdown();
        producer.shutdown();
        Map<String, Object> lat = new LinkedHashMap<>();
        for (int i = 0; i < levels.length; i++) {
            String key = "D-" + levels[i];
            Long at = arrived.get(key);
            long want = Long.parseLong(expectMs[i]);
            if (at == null) {
                failures.add(key + " never arrived");
                continue;
            }
            long took = at - sentAt.get(key);
            lat.put(levels[i], took);
            if (took < want - 150 || took > want + 6000) {
                failures.add("delay level " + levels[i] + " arrived after " + took + " ms, expected ~" + want);
            }
        }
        result.put("arrival_ms_by_level", lat);
        result.put("properties", props);
        if (!done) {
            failures.add("timed out");
        }
    }

    // --- seed ----------------------------------------------------------------------------------
    private void seed() throws Exception {
        int count = intOpt("count", 40);
        DefaultMQProducer producer = producer();
        Map<String, String> ids = new TreeMap<>();
        Map<String, Integer> perQueue = new TreeMap<>();
        for (int i = 0; i < count; i++) {
            String key = "SEED-" + i;
            Message m = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", key, ("seed " + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                failures.add("send " + key + ": " + r.getSendStatus());
            }
            ids.put(key, r.getMsgId());
            perQueue.merge(Integer.toString(r.getMessageQueue().getQueueId()), 1, Integer::sum);
        }
        producer.shutdown();
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = pushConsumer(group, "s1", MessageModel.CLUSTERING);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(m.getKeys());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        if (!waitFor(() -> got.size() >= count)) {
            failures.add("consumed " + got.size() + "/" + count);
        }
        // the retry queue joins at a later rebalance (its route exists once the heartbeat created it); wait
        // for it so that its offset (0, from QUERY_CONSUMER_OFFSET) is among those persisted at shutdown
        String retry = "%RETRY%" + group;
        if (!waitFor(() -> consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable()
                .keySet().stream().anyMatch(mq -> mq.getTopic().equals(retry)))) {
            failures.add("the retry queue was never assigned");
        }
        // shutdown() persists the consumed offsets to the broker (UPDATE_CONSUMER_OFFSET)
        consumer.shutdown();
        result.put("count", count);
        result.put("msg_ids", ids);
        result.put("per_queue", perQueue);
    }

    // --- acl -----------------------------------------------------------------------------------
    private void acl() throws Exception {
        String ak = opt.getOrDefault("ak", "RocketMQ");
        String sk = opt.getOrDefault("sk", "12345678");
        String expect = opt.getOrDefault("expect", "ok");
        AclClientRPCHook hook = new AclClientRPCHook(new SessionCredentials(ak, sk));
        DefaultMQProducer p = new DefaultMQProducer("P_" + group, hook);
        p.setNamesrvAddr(ns);
        p.setInstanceName("acl-producer");
        p.setSendMsgTimeout(15000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        boolean sent = false;
        try {
            SendResult r = p.send(new Message(topic, "TagAcl", "ACL-1", "acl".getBytes(StandardCharsets.UTF_8)));
            sent = r.getSendStatus() == SendStatus.SEND_OK;
            result.put("send_status", r.getSendStatus().toString());
        } catch (MQBrokerException e) {
            result.put("send_response_code", e.getResponseCode());
            result.put("send_error", e.getErrorMessage());
        } catch (MQClientException e) {
            // "Send [1] times, still failed": the broker's answer is the cause
            Throwable cause = e.getCause();
            if (cause instanceof MQBrokerException) {
                result.put("send_response_code", ((MQBrokerException) cause).getResponseCode());
                result.put("send_error", ((MQBrokerException) cause).getErrorMessage());
            } else {
                result.put("send_response_code", e.getResponseCode());
                result.put("send_error", String.valueOf(cause != null ? cause : e.getErrorMessage()));
            }
        }
        p.shutdown();
        result.put("sent", sent);
        if (sent) {
            DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, hook);
            c.setNamesrvAddr(ns);
            c.setInstanceName("acl-consumer");
            c.start();
            int found = 0;
            try {
                for (MessageQueue mq : c.fetchSubscribeMessageQueues(topic)) {
                    PullResult pr = c.pull(mq, "*", 0, 32, 5000);
                    if (pr.getPullStatus() == PullStatus.FOUND) {
                        found += pr.getMsgFoundList().size();
                    }
                }
            } catch (MQBrokerException e) {
                result.put("pull_response_code", e.getResponseCode());
                result.put("pull_error", e.getErrorMessage());
            }
            c.shutdown();
            result.put("pulled", found);
        }
        if (expect.equals("ok") && !sent) {
            failures.add("send with " + ak + " was rejected: " + result.get("send_error"));
        } else if (expect.equals("denied") && sent) {
            failures.add("send with " + ak + " (expected to be denied) was accepted");
        }
    }

    // --- helpers ---------------------------------------------------------------------------------
    private DefaultMQProducer producer() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("P_" + group);
        p.setNamesrvAddr(ns);
        p.setInstanceName("producer");
        p.setSendMsgTimeout(15000);
        p.setDefaultTopicQueueNums(intOpt("queues", 4));
        p.start();
        return p;
    }

    /** Sends one warm-up message (auto-creating the topic through TBW102); the topic's write queue count. */
    private int ensureTopic(DefaultMQProducer p) throws Exception {
        send(p, new Message(topic, "TagW", "WARMUP", "warm-up".getBytes(StandardCharsets.UTF_8)));
        // The broker registers an auto-created topic with the name server asynchronously.
        int[] n = {0};
        waitFor(() -> {
            try {
                n[0] = p.fetchPublishMessageQueues(topic).size();
                return true;
            } catch (Exception e) {
                return false;
            }
        });
        if (n[0] == 0) {
            throw new IllegalStateException("no route for " + topic + " after the warm-up send");
        }
        event("topic-ready", "queues", n[0]);
        return n[0];
    }

    /** A sync send that must answer SEND_OK; returns the time it was sent. */
    private long send(DefaultMQProducer p, Message m) throws Exception {
        long at = System.currentTimeMillis();
        SendResult r = p.send(m);
        if (r.getSendStatus() != SendStatus.SEND_OK) {
            failures.add("send of " + m.getKeys() + ": " + r.getSendStatus());
        }
        return at;
    }

    private DefaultMQPushConsumer pushConsumer(String g, String instance, MessageModel model) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(g);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance);
        c.setMessageModel(model);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(4);
        c.setConsumeThreadMax(4);
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(2000);
        c.subscribe(topic, "*");
        return c;
    }

    private boolean waitFor(BooleanSupplier cond) throws InterruptedException {
        return waitFor(timeoutMs, cond);
    }

    private boolean waitFor(long ms, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < end) {
            if (cond.getAsBoolean()) {
                return true;
            }
            Thread.sleep(50);
        }
        return cond.getAsBoolean();
    }

    private int intOpt(String name, int dflt) {
        String v = opt.get(name);
        return v == null ? dflt : Integer.parseInt(v);
    }

    private static Map<String, Integer> snapshot(Map<String, AtomicInteger> m) {
        Map<String, Integer> out = new TreeMap<>();
        m.forEach((k, v) -> out.put(k, v.get()));
        return out;
    }

    private static void event(String name, Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", name);
        m.put("t_ms", System.currentTimeMillis() - T0);
        for (int i = 0; i + 1 < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        emit(m);
    }

    private static synchronized void emit(Map<String, Object> m) {
        System.out.println(JSON.toJSONString(m, SerializerFeature.WriteNonStringKeyAsString));
        System.out.flush();
    }
}

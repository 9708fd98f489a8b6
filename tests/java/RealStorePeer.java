import java.nio.charset.StandardCharsets;
import java.io.PrintStream;
import java.io.FileOutputStream;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.admin.TopicOffset;
import org.apache.rocketmq.common.admin.TopicStatsTable;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The Java side of rocketstream's real-store tests (tests/realbroker drives it).
 *
 *   write --namesrv ADDR --prefix P --count N [--timeout-s S]
 *       Writes a varied workload through the 4.9.8 Java client: topics P+"Orders" (4 queues),
 *       P+"Events" (3 queues), P+"Batch" (2 queues); tags, several keys, user properties with
 *       non-ASCII values, a user flag; bodies over 4 KiB (DefaultMQProducer compresses them:
 *       compressMsgBodyOverHowmuch = 4096, SYSFLAG bit 0x1); send(Collection) batches; delayed
 *       messages (delay levels 1 and 2 go through SCHEDULE_TOPIC_XXXX); a push consumer group
 *       P+"Group" that answers RECONSUME_LATER twice for some messages (sendMessageBack ->
 *       SCHEDULE_TOPIC_XXXX -> %RETRY%P+"Group"), and that has committed every offset on the broker
 *       (ConsumerOffsetManager -> config/consumerOffset.json) before the program exits.
 *       Prints one JSON summary line.
 *
 *   read --namesrv ADDR --topics T1,T2,... --out FILE
 *       The oracle: for every queue of each topic (admin examineTopicStats), pulls every message
 *       from the broker's min offset to its max offset with DefaultMQPullConsumer and writes one JSON
 *       line per queue ({"kind":"queue",...}) and per message ({"kind":"msg",...}) - what the Java
 *       client reads. MIN_OFFSET / MAX_OFFSET are dropped from the properties: the client adds them
 *       after a pull (PullAPIWrapper.processPullResult), they are not in the store.
 */
public final class RealStorePeer {
    private static final long T0 = System.currentTimeMillis();
    private static final String[] CITIES = {"Zürich", "東京", "Москва", "São Paulo", "plain"};
    private static final String[] TAGS = {"TagA", "TagB", "TagC", null};

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage();
        }
        Map<String, String> opt = new TreeMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        String namesrv = opt.getOrDefault("namesrv", "127.0.0.1:9876");
        int code;
        if (args[0].equals("write")) {
            code = write(namesrv, opt.getOrDefault("prefix", "Rs"), Integer.parseInt(opt.getOrDefault("count", "5000")),
                Integer.parseInt(opt.getOrDefault("timeout-s", "120")));
        } else if (args[0].equals("read")) {
            code = read(namesrv, Arrays.asList(opt.get("topics").split(",")), opt.get("out"));
        } else {
            usage();
            return;
        }
        System.exit(code);
    }

    private static void usage() {
        System.err.println("usage: RealStorePeer write --namesrv A --prefix P --count N | read --namesrv A --topics T,.. --out F");
        System.exit(2);
    }

    static void log(String s) {
        System.err.printf("[peer +%6d ms] %s%n", System.currentTimeMillis() - T0, s);
    }

    // ------------------------------------------------------------------------------------- write
    static int write(String namesrv, String prefix, int count, int timeoutS) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutS * 1000L;
        String orders = prefix + "Orders", events = prefix + "Events", batch = prefix + "Batch";
        String group = prefix + "Group";

        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setAdminExtGroup(prefix + "Admin");
        admin.start();
        ClusterInfo ci = admin.examineBrokerClusterInfo();
        List<String> masters = new ArrayList<>();
        for (BrokerData bd : ci.getBrokerAddrTable().values()) {
            masters.add(bd.getBrokerAddrs().get(0L));
        }
        if (masters.size() != 1) {
            log("expected exactly one master, got " + masters);
            return 1;
        }
        createTopic(admin, masters.get(0), orders, 4);
        createTopic(admin, masters.get(0), events, 3);
        createTopic(admin, masters.get(0), batch, 2);

        DefaultMQProducer producer = new DefaultMQProducer(prefix + "Producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(15000);
        producer.setRetryTimesWhenSendFailed(3);
        producer.start();
        waitForRoutes(producer, deadline, orders, events, batch);

        // Plan: ~1/5 of the messages in batches of 8 on P+"Batch", 24 delayed, the rest single sends.
        int nBatch = (count / 5) / 8 * 8;
        int nDelayed = 24;
        int nSingle = count - nBatch - nDelayed;
        Random rnd = new Random(20240611L ^ prefix.hashCode());
        List<Message> singles = new ArrayList<>();
        int retryExpected = 0;
        for (int i = 0; i < nSingle; i++) {
            String topic = (i % 3 == 0) ? events : orders;
            Message m = newMessage(topic, i, rnd);
            if (topic.equals(orders) && i % 150 == 1 && ("TagA".equals(m.getTags()) || "TagB".equals(m.getTags()))) {
                m.putUserProperty("retry", "true");
                retryExpected++;
            }
            singles.add(m);
        }
        List<List<Message>> batches = new ArrayList<>();
        for (int b = 0; b < nBatch / 8; b++) {
            List<Message> list = new ArrayList<>();
            for (int j = 0; j < 8; j++) {
                int seq = nSingle + b * 8 + j;
                Message m = newMessage(batch, seq, rnd);
                if (m.getBody().length > 4000) {
                    m.setBody(Arrays.copyOf(m.getBody(), 1000)); // keep a batch well under 4 MiB
                }
                list.add(m);
            }
            batches.add(list);
        }
        List<Message> delayed = new ArrayList<>();
        for (int d = 0; d < nDelayed; d++) {
            int seq = nSingle + nBatch + d;
            Message m = newMessage(orders, seq, rnd);
            m.setTags(d % 2 == 0 ? "TagA" : "TagB");
            m.putUserProperty("delayed", "true");
            m.setDelayTimeLevel(1 + d % 2);   // 1 s / 5 s (MessageStoreConfig.messageDelayLevel)
            delayed.add(m);
        }

        // consumer first, so that delayed and retried messages are consumed as they arrive
        AtomicInteger retryDone = new AtomicInteger();
        AtomicInteger laterAnswers = new AtomicInteger();
        Set<String> delayedSeen = ConcurrentHashMap.newKeySet();
        Set<String> retriedSeq = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.setConsumeThreadMin(2);
        consumer.setConsumeThreadMax(2);
        consumer.subscribe(orders, "TagA || TagB");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String seq = m.getUserProperty("seq");
                if ("true".equals(m.getUserProperty("delayed"))) {
                    delayedSeen.add(seq);
                }
                if ("true".equals(m.getUserProperty("retry"))) {
                    if (m.getReconsumeTimes() < 2) {
                        // ConsumeMessageConcurrentlyService.processConsumeResult -> sendMessageBack with
                        // this delay level (0 would mean 3 + reconsumeTimes = 10 s and more)
                        ctx.setDelayLevelWhenNextConsume(1);
                        laterAnswers.incrementAndGet();
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    if (retriedSeq.add(seq)) {
                        retryDone.incrementAndGet();
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        long t = System.currentTimeMillis();
        for (Message m : delayed) {
            check(producer.send(m), m);
        }
        ExecutorService pool = Executors.newFixedThreadPool(4);
        List<Future<?>> futures = new ArrayList<>();
        int slices = 4;
        for (int s = 0; s < slices; s++) {
            final int slice = s;
            futures.add(pool.submit(() -> {
                for (int i = slice; i < singles.size(); i += slices) {
                    check(producer.send(singles.get(i)), singles.get(i));
                }
                for (int b = slice; b < batches.size(); b += slices) {
                    check(producer.send(batches.get(b)), batches.get(b).get(0));
                }
                return null;
            }));
        }
        for (Future<?> f : futures) {
            f.get();
        }
        pool.shutdown();
        log("sent " + nSingle + " single, " + nBatch + " batched (" + batches.size() + " batches), " + nDelayed
            + " delayed messages in " + (System.currentTimeMillis() - t) + " ms");

        while ((retryDone.get() < retryExpected || delayedSeen.size() < nDelayed) && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        log("consumer: retried " + retryDone.get() + "/" + retryExpected + " (RECONSUME_LATER answers " + laterAnswers.get()
            + "), delayed seen " + delayedSeen.size() + "/" + nDelayed);
        if (retryDone.get() < retryExpected || delayedSeen.size() < nDelayed) {
            log("timed out waiting for retries / delayed messages");
            return 1;
        }
        // the broker's committed offsets of the group must reach every queue's max offset
        boolean committed = false;
        while (!committed && System.currentTimeMillis() < deadline) {
            Thread.sleep(300);
            ConsumeStats cs = admin.examineConsumeStats(group);
            committed = !cs.getOffsetTable().isEmpty();
            for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
                if (e.getValue().getConsumerOffset() < e.getValue().getBrokerOffset()) {
                    committed = false;
                }
            }
        }
        log("broker-side offsets of " + group + " committed: " + committed);
        consumer.shutdown();
        producer.shutdown();
        admin.shutdown();
        if (!committed) {
            return 1;
        }
        JSONObject summary = new JSONObject(true);
        summary.put("single", nSingle);
        summary.put("batched", nBatch);
        summary.put("delayed", nDelayed);
        summary.put("retried", retryExpected);
        summary.put("reconsumeLaterAnswers", laterAnswers.get());
        summary.put("group", group);
        summary.put("topics", Arrays.asList(orders, events, batch));
        System.out.println(summary.toJSONString());
        return 0;
    }

    static Message newMessage(String topic, int seq, Random rnd) {
        String tag = TAGS[seq % TAGS.length];
        List<String> keys = new ArrayList<>(Arrays.asList("K" + seq, "ORDER-" + (seq % 97)));
        if (seq % 5 == 0) {
            keys.add("kü-" + seq);
        }
        byte[] body;
        if (seq % 40 == 7) {
            // over 4 KiB and compressible: the producer deflates it (DefaultMQProducerImpl.tryToCompressMessage)
            StringBuilder sb = new StringBuilder();
            while (sb.length() < 5000 + rnd.nextInt(8000)) {
                sb.append("big body of message ").append(seq).append(" – line ").append(sb.length()).append('\n');
            }
            body = sb.toString().getBytes(StandardCharsets.UTF_8);
        } else if (seq % 11 == 3) {
            body = new byte[50 + rnd.nextInt(1500)];
            rnd.nextBytes(body);
        } else {
            StringBuilder sb = new StringBuilder("message ").append(seq).append(" ¿ünïcødé? ");
            int len = 100 + rnd.nextInt(1400);
            while (sb.length() < len) {
                sb.append((char) ('a' + rnd.nextInt(26)));
            }
            body = sb.toString().getBytes(StandardCharsets.UTF_8);
        }
        Message m = new Message(topic, tag, body);
        m.setKeys(keys);
        m.setFlag(seq % 3);
        m.putUserProperty("seq", Integer.toString(seq));
        m.putUserProperty("city", CITIES[seq % CITIES.length]);
        if (seq % 7 == 0) {
            m.putUserProperty("emoji", "🚀 " + seq);
        }
        return m;
    }

    static void check(SendResult r, Message m) {
        if (r.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send to " + m.getTopic() + " returned " + r);
        }
    }

    static void createTopic(DefaultMQAdminExt admin, String addr, String topic, int queues) throws Exception {
        TopicConfig tc = new TopicConfig(topic);
        tc.setReadQueueNums(queues);
        tc.setWriteQueueNums(queues);
        tc.setPerm(6);
        admin.createAndUpdateTopicConfig(addr, tc);
    }

    static void waitForRoutes(DefaultMQProducer producer, long deadline, String... topics) throws Exception {
        for (String topic : topics) {
            while (true) {
                try {
                    if (!producer.fetchPublishMessageQueues(topic).isEmpty()) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                Thread.sleep(100);
            }
        }
    }

    // -------------------------------------------------------------------------------------- read
    static int read(String namesrv, List<String> topics, String out) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setAdminExtGroup("rs_oracle_admin");
        admin.start();
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("rs_oracle_reader");
        consumer.setNamesrvAddr(namesrv);
        consumer.start();
        int messages = 0;
        try (PrintStream ps = new PrintStream(new FileOutputStream(out), false, "UTF-8")) {
            for (String topic : topics) {
                if (topic.isEmpty()) {
                    continue;
                }
                TopicStatsTable stats;
                try {
                    stats = admin.examineTopicStats(topic);
                } catch (Exception ex) {
                    // e.g. a topic the broker has no TopicConfig / route for: say so, go on
                    JSONObject err = new JSONObject(true);
                    err.put("kind", "error");
                    err.put("topic", topic);
                    err.put("error", String.valueOf(ex).split("\n")[0]);
                    ps.println(err.toJSONString());
                    continue;
                }
                List<Map.Entry<MessageQueue, TopicOffset>> queues = new ArrayList<>(stats.getOffsetTable().entrySet());
                queues.sort(Comparator.comparingInt(e -> e.getKey().getQueueId()));
                for (Map.Entry<MessageQueue, TopicOffset> e : queues) {
                    MessageQueue mq = e.getKey();
                    long min = e.getValue().getMinOffset(), max = e.getValue().getMaxOffset();
                    JSONObject q = new JSONObject(true);
                    q.put("kind", "queue");
                    q.put("topic", topic);
                    q.put("queueId", mq.getQueueId());
                    q.put("minOffset", min);
                    q.put("maxOffset", max);
                    List<String> statuses = new ArrayList<>();
                    long offset = min;
                    int guard = 0;
                    while (offset < max && guard++ < 100000) {
                        PullResult pr;
                        try {
                            pr = consumer.pull(mq, "*", offset, 32);
                        } catch (Exception ex) {
                            // e.g. the broker failing on the store: report it in the queue line, go on
                            statuses.add("ERROR@" + offset + ": " + String.valueOf(ex).split("\n")[0]);
                            break;
                        }
                        switch (pr.getPullStatus()) {
                            case FOUND:
                                for (MessageExt m : pr.getMsgFoundList()) {
                                    ps.println(message(m).toJSONString());
                                    messages++;
                                }
                                break;
                            default:
                                statuses.add(pr.getPullStatus() + "@" + offset + "->" + pr.getNextBeginOffset());
                                break;
                        }
                        if (pr.getNextBeginOffset() <= offset) {
                            statuses.add("STUCK@" + offset);
                            break;
                        }
                        offset = pr.getNextBeginOffset();
                    }
                    q.put("pullStatuses", statuses);
                    ps.println(q.toJSONString());
                }
            }
        } finally {
            consumer.shutdown();
            admin.shutdown();
        }
        log("read " + messages + " messages of " + topics.size() + " topics");
        return 0;
    }

    static JSONObject message(MessageExt m) throws Exception {
        JSONObject o = new JSONObject(true);
        o.put("kind", "msg");
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("msgId", m.getMsgId());   // MessageClientExt: UNIQ_KEY when present, else offsetMsgId
        o.put("offsetMsgId", ((org.apache.rocketmq.common.message.MessageClientExt) m).getOffsetMsgId());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("storeSize", m.getStoreSize());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
        o.put("bodyLength", body.length);
        o.put("bodySha256", hex(MessageDigest.getInstance("SHA-256").digest(body)));
        Map<String, String> props = new TreeMap<>(m.getProperties());
        props.remove(MessageConst.PROPERTY_MIN_OFFSET);
        props.remove(MessageConst.PROPERTY_MAX_OFFSET);
        o.put("properties", props);
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("bornHost", m.getBornHostString() + ":" + ((java.net.InetSocketAddress) m.getBornHost()).getPort());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("storeHost", ((java.net.InetSocketAddress) m.getStoreHost()).getAddress().getHostAddress() + ":"
            + ((java.net.InetSocketAddress) m.getStoreHost()).getPort());
        o.put("sysFlag", m.getSysFlag());
        o.put("bodyCRC", m.getBodyCRC());
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("flag", m.getFlag());
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        return o;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }
}

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import com.alibaba.fastjson.JSON;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The Java side of the Python-client interop scenarios (tests/client/test_interop.py), using only the
 * shipped RocketMQ 4.9.8 client (DefaultMQProducer, DefaultMQPushConsumer). Every stdout line is one
 * JSON object.
 *
 *   produce NS TOPIC --count N [--big-every 5] [--queues 4]
 *       DefaultMQProducer sends N messages: keys "IK-i IKB-i" (two keys), tags "Tag{i%3}", user properties
 *       seq=i and "uprop"="välue-i"; every big-every-th body is 6,000 compressible bytes (the Java producer
 *       compresses bodies over 4 KiB: compressMsgBodyOverHowmuch), the others are short text. One line per
 *       send {"sent": i, "keys", "tags", "msgId", "offsetMsgId", "queueId", "queueOffset", "bodyLen",
 *       "bodySha", "status"}, then {"result": "DONE", "sent": n, "errors": e}.
 *
 *   consume NS TOPIC GROUP [--count N] [--timeout-s 60] [--instance NAME] [--from first|last]
 *           [--stop FILE] [--orderly 0|1] [--work-ms 0] [--expression *]
 *       DefaultMQPushConsumer (CLUSTERING) with a concurrent (or orderly) listener that returns
 *       CONSUME_SUCCESS / SUCCESS. One line per message {"msg": ..., "t": epoch ms, "inst", "queueId",
 *       "queueOffset", "msgId", "keys", "tags", "props" (all properties), "bodyLen", "bodySha", "body"
 *       (UTF-8 text when short and printable), "reconsumeTimes", "bornHost", "storeSize", "sysFlag"},
 *       and whenever its allocation changes {"alloc": [queueIds], "t", "inst", "clientId"} (the
 *       non-dropped ProcessQueues of the rebalance). Stops after COUNT messages (0 = never), when the
 *       stop file exists, or at the timeout; last line {"result": "DONE", "received": n, ...}.
 */
public final class ClientInterop {
    private static final Object OUT = new Object();

    public static void main(String[] args) throws Exception {
        if (System.getProperty("rocketmq.client.rebalance.waitInterval") == null) {
            System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        }
        if (args.length < 3) {
            System.err.println("usage: ClientInterop produce NS TOPIC [opts] | consume NS TOPIC GROUP [opts]");
            System.exit(2);
        }
        String mode = args[0];
        boolean hasGroup = mode.equals("consume");
        Map<String, String> opt = new TreeMap<>();
        for (int i = hasGroup ? 4 : 3; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        int rc;
        switch (mode) {
            case "produce": rc = produce(args[1], args[2], opt); break;
            case "consume": rc = consume(args[1], args[2], args[3], opt); break;
            default:
                System.err.println("unknown mode " + mode);
                rc = 2;
        }
        System.exit(rc);
    }

    private static long longOpt(Map<String, String> opt, String k, long d) {
        String v = opt.get(k);
        return v == null ? d : Long.parseLong(v);
    }

    static String sha(byte[] b) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(b);
        StringBuilder sb = new StringBuilder();
        for (byte x : d) {
            sb.append(String.format("%02x", x));
        }
        return sb.toString();
    }

    static byte[] bigBody(long i) {
        StringBuilder sb = new StringBuilder();
        while (sb.length() < 6000) {
            sb.append("big body ").append(i).append(" compressible text; ");
        }
        return sb.substring(0, 6000).getBytes(StandardCharsets.UTF_8);
    }

    static int produce(String ns, String topic, Map<String, String> opt) throws Exception {
        long count = longOpt(opt, "count", 20);
        long bigEvery = longOpt(opt, "big-every", 5);
        DefaultMQProducer p = new DefaultMQProducer("ClientInteropProducer");
        p.setNamesrvAddr(ns);
        p.setInstanceName("interop-produce-" + ProcessHandle.current().pid());
        p.setDefaultTopicQueueNums((int) longOpt(opt, "queues", 4));
        p.setSendMsgTimeout(10000);
        p.start();
        long errors = 0;
        for (long i = 0; i < count; i++) {
            byte[] body = bigEvery > 0 && i % bigEvery == 0 ? bigBody(i)
                    : ("java body " + i + " ü").getBytes(StandardCharsets.UTF_8);
            Message m = new Message(topic, "Tag" + (i % 3), "IK-" + i + " IKB-" + i, body);
            m.putUserProperty("seq", Long.toString(i));
            m.putUserProperty("uprop", "välue-" + i);
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("sent", i);
            line.put("keys", m.getKeys());
            line.put("tags", m.getTags());
            line.put("bodyLen", body.length);
            line.put("bodySha", sha(body));
            try {
                SendResult r = p.send(m);
                line.put("status", r.getSendStatus().toString());
                line.put("msgId", r.getMsgId());
                line.put("offsetMsgId", r.getOffsetMsgId());
                line.put("queueId", r.getMessageQueue().getQueueId());
                line.put("queueOffset", r.getQueueOffset());
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    errors++;
                }
            } catch (Exception e) {
                errors++;
                line.put("status", "ERROR");
                line.put("error", e.toString());
            }
            emit(line);
        }
        p.shutdown();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("result", "DONE");
        r.put("sent", count);
        r.put("errors", errors);
        emit(r);
        return errors == 0 ? 0 : 1;
    }

    static int consume(String ns, String topic, String group, Map<String, String> opt) throws Exception {
        long count = longOpt(opt, "count", 0);
        long timeoutMs = 1000 * longOpt(opt, "timeout-s", 60);
        long workMs = longOpt(opt, "work-ms", 0);
        String inst = opt.getOrDefault("instance", "interop-" + ProcessHandle.current().pid());
        File stop = opt.containsKey("stop") ? new File(opt.get("stop")) : null;
        AtomicLong got = new AtomicLong();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(inst);
        c.setPollNameServerInterval(1000);
        c.setConsumeFromWhere("last".equals(opt.get("from")) ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
                : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, opt.getOrDefault("expression", "*"));
        if ("1".equals(opt.get("orderly"))) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    record(inst, m, got);
                }
                work(workMs);
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    record(inst, m, got);
                }
                work(workMs);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        String clientId = c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId();
        Map<String, Object> started = new LinkedHashMap<>();
        started.put("event", "started");
        started.put("inst", inst);
        started.put("clientId", clientId);
        emit(started);
        long t0 = System.currentTimeMillis();
        List<Integer> lastAlloc = null;
        while (System.currentTimeMillis() - t0 < timeoutMs) {
            List<Integer> alloc = new ArrayList<>();
            for (Map.Entry<MessageQueue, ProcessQueue> e
                    : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
                if (e.getKey().getTopic().equals(topic) && !e.getValue().isDropped()) {
                    alloc.add(e.getKey().getQueueId());
                }
            }
            Collections.sort(alloc);
            if (!alloc.equals(lastAlloc)) {
                lastAlloc = alloc;
                Map<String, Object> a = new LinkedHashMap<>();
                a.put("alloc", alloc);
                a.put("t", System.currentTimeMillis());
                a.put("inst", inst);
                a.put("clientId", clientId);
                emit(a);
            }
            if ((count > 0 && got.get() >= count) || (stop != null && stop.exists())) {
                break;
            }
            Thread.sleep(50);
        }
        c.shutdown();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("result", "DONE");
        r.put("received", got.get());
        r.put("expected", count);
        r.put("inst", inst);
        r.put("clientId", clientId);
        emit(r);
        return 0;
    }

    private static void work(long ms) {
        if (ms > 0) {
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static void record(String inst, MessageExt m, AtomicLong got) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("msg", got.incrementAndGet());
        line.put("t", System.currentTimeMillis());
        line.put("inst", inst);
        line.put("topic", m.getTopic());
        line.put("queueId", m.getQueueId());
        line.put("queueOffset", m.getQueueOffset());
        line.put("msgId", m.getMsgId());
        line.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null);
        line.put("keys", m.getKeys());
        line.put("tags", m.getTags());
        line.put("props", new TreeMap<>(m.getProperties()));
        byte[] body = m.getBody();
        line.put("bodyLen", body.length);
        try {
            line.put("bodySha", sha(body));
        } catch (Exception e) {
            line.put("bodySha", e.toString());
        }
        if (body.length <= 256) {
            line.put("body", new String(body, StandardCharsets.UTF_8));
        }
        line.put("reconsumeTimes", m.getReconsumeTimes());
        line.put("sysFlag", m.getSysFlag());
        line.put("storeSize", m.getStoreSize());
        line.put("bornHost", String.valueOf(m.getBornHost()));
        emit(line);
    }

    static void emit(Map<String, Object> m) {
        String s = JSON.toJSONString(m);
        synchronized (OUT) {
            System.out.println(s);
            System.out.flush();
        }
    }
}
